"""What the tests share: helpers, data and the bodies other processes run (no tests here).

Note [One way to import the tests' helpers]: every test, conftest, script and benchmark imports
these modules by their full name from the repository's root, ``from tests.support import ipc_peer``
or ``from tests.support.native_nn import check``; never by a bare name (``import ipc_peer``) and
never from a conftest. ``python -m pytest`` (``make test``) puts the root on ``sys.path``; the
children of ``spawn`` and ``forkserver`` inherit that ``sys.path`` and unpickle a function by that
same full name (``RankPool``'s ``_serve``, ``ipc_peer.serve``), so parent and child agree on one
module; torchrun's children get the root through ``PYTHONPATH``. ``tests/`` itself has no
``__init__.py`` (nor have its tier folders): pytest then imports each test file under its own name,
so test file names are unique across folders, and the root is not pushed ahead of a ``PYTHONPATH``
that puts another build of ``openreg_lab`` first (scripts/test_asan.sh). tests/layout/test_tiers.py
checks all of this.
"""
