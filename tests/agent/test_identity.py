"""The passwd and group files that name a uid without an account (`agent.identity`): pure text."""

from pathlib import Path

from suanli.agent.identity import Account, IdentityFiles, group_text, passwd_text

HOST_PASSWD = "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
HOST_GROUP = "root:x:0:\nnogroup:x:65534:\n"
ACCOUNT = Account("u61000", 61000, 61000, Path("/srv/rentals/r-1/work"), "/bin/bash", "suanli rental")


def test_the_uid_is_added_after_the_hosts_entries() -> None:
    assert passwd_text(HOST_PASSWD, ACCOUNT).splitlines() == [
        "root:x:0:0:root:/root:/bin/bash",
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin",
        "u61000:x:61000:61000:suanli rental:/srv/rentals/r-1/work:/bin/bash",
    ]
    assert group_text(HOST_GROUP, ACCOUNT).splitlines() == [
        "root:x:0:",
        "nogroup:x:65534:",
        "u61000:x:61000:",
    ]


def test_an_entry_of_the_same_name_or_number_gives_way() -> None:
    """A stale entry for the uid, or a host user of the same name, would make lookups answer two ways."""
    host = HOST_PASSWD + "old:x:61000:61000::/tmp:/bin/sh\nu61000:x:5000:5000::/home/u:/bin/sh\n"
    names = [line.split(":")[0] for line in passwd_text(host, ACCOUNT).splitlines()]
    assert names == ["root", "nobody", "u61000"]
    groups = [line.split(":")[0] for line in group_text(HOST_GROUP + "g:x:61000:\n", ACCOUNT).splitlines()]
    assert groups == ["root", "nogroup", "u61000"]


def test_the_rental_s_own_preload_comes_after_nss_wrapper() -> None:
    files = IdentityFiles(Path("/usr/lib/libnss_wrapper.so"), Path("/r/passwd"), Path("/r/group"))
    assert files.env()["LD_PRELOAD"] == "/usr/lib/libnss_wrapper.so"
    assert files.env("libjemalloc.so")["LD_PRELOAD"] == "/usr/lib/libnss_wrapper.so libjemalloc.so"
    assert files.env()["NSS_WRAPPER_PASSWD"] == "/r/passwd" and files.env()["NSS_WRAPPER_GROUP"] == "/r/group"
