"""The panels and screens of the UI, one module per panel: a widget with its own bindings,
messages and styles. A panel draws what it is given (a snapshot, a focus) and posts a message
when the person picks something; it never talks to the debuggee itself."""
