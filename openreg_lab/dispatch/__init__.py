"""The dispatch layer (``csrc/aten`` seen from Python): how openreg resolves operators.

- ``coverage``: ``coverage()``, every operator and how openreg runs it
- ``profiles``: emulate another backend's op coverage (``use_profile``)
- ``explain``: ``explain()``, one call's dispatch path step by step
- ``fallback``: the fallback policy (allow / warn / error)
- ``native``: the hand-written kernels (``native_ops.yaml``); ``autocast``: autocast's rules
"""
