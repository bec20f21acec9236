"""``netlink_import``: pyroute2's IPRoute without the rest of pyroute2, and the package
whole again for anyone who asks for more. In a fresh interpreter each: what a process
imported before decides everything here."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout.strip()


def test_iproute_loads_without_the_rest_of_pyroute2_and_the_package_is_whole_on_demand() -> None:
    printed = run(
        """
        import sys
        from roleserve_clusternet.netlink_import import ip_route_class, netlink_error
        IPRoute, NetlinkError = ip_route_class(), netlink_error()
        with IPRoute() as ipr:
            assert ipr.link_lookup(ifname="lo") == [1]
        print("pyroute2.ndb.main" in sys.modules, "pyroute2.conntrack" in sys.modules)
        import pyroute2
        print(pyroute2.ipset.__name__, "pyroute2.ndb.main" in sys.modules)  # a submodule
        from pyroute2 import NDB, IPRoute as Whole, NetlinkError as WholeError
        import pyroute2
        print("pyroute2.ndb.main" in sys.modules, Whole is IPRoute, WholeError is NetlinkError)
        print(bool(pyroute2.__version__), NDB is pyroute2.NDB)
        """
    )
    assert printed.splitlines() == [
        "False False",
        "pyroute2.ipset False",
        "True True True",
        "True True",
    ]


def test_threads_asking_for_the_whole_package_at_once_all_get_it() -> None:
    printed = run(
        """
        import threading
        from roleserve_clusternet.netlink_import import ip_route_class
        ip_route_class()
        import pyroute2
        found = []
        def ask():
            from pyroute2 import NDB, WiSet
            found.append((NDB.__name__, WiSet.__name__))
        threads = [threading.Thread(target=ask) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        print(sorted(set(found)), len(found))
        """
    )
    assert printed == "[('NDB', 'WiSet')] 4"


def test_where_pyroute2_was_imported_whole_it_is_that_one() -> None:
    printed = run(
        """
        import pyroute2
        from roleserve_clusternet.netlink_import import ip_route_class, netlink_error
        print(ip_route_class() is pyroute2.IPRoute, netlink_error() is pyroute2.NetlinkError)
        """
    )
    assert printed == "True True"
