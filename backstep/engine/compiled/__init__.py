"""torch.compile under backstep: eager stepping on request, compiled regions made readable."""
