"""The views layer: widgets and static HTML drawn from the recording and dispatch tables."""
