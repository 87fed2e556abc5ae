"""The demo walkthroughs: finding them (``catalog``) and their narration texts (``narration``)."""
