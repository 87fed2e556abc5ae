"""What the app's keys do: the ``action_*`` methods of ``BackstepApp``, as mixins grouped by
what they reach (the script, the view, breakpoints, the console). A new key is a ``Binding``
in ``live_app.py`` and an action here. The mixins are typed by ``host.AppHost``, never by
importing the app."""
