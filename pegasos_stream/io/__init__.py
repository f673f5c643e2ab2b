"""Records and where they come from and go to: sources, sinks, mail formats, file identities, helper threads."""
