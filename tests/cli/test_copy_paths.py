"""`suanli cp`'s pure parts: which side is in a rental, and what an archive from a node may write here."""

import io
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from suanli.cli.main import app
from suanli.client.copy import CopyError, RemotePath, extract


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("rnt_1:data", RemotePath("rnt_1", "data")),
        ("rnt_1:/work/a:b", RemotePath("rnt_1", "/work/a:b")),
        ("rnt_1:", RemotePath("rnt_1", "")),
        ("./rnt_1:data", None),  # a slash before the colon: a local path
        ("data", None),
        (":data", None),
    ],
)
def test_rental_colon_path_is_remote_and_anything_else_local(text: str, parsed: RemotePath | None) -> None:
    assert RemotePath.parse(text) == parsed


def _archive(*members: tuple[str, bytes | None]) -> io.BytesIO:
    """A tar of files (bytes) and directories (None) with the given names."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as archive:
        for name, content in members:
            info = tarfile.TarInfo(name)
            if content is None:
                info.type = tarfile.DIRTYPE
                archive.addfile(info)
            else:
                info.size = len(content)
                archive.addfile(info, io.BytesIO(content))
    data.seek(0)
    return data


def test_a_directory_or_a_file_is_written_under_the_name_asked_for(tmp_path: Path) -> None:
    """A directory comes as its contents (`./...`), a file by its name; either lands as the target."""
    extract(_archive(("./", None), ("./a.txt", b"1"), ("./s/b", b"2")), tmp_path, "results", "r2")
    assert (tmp_path / "r2" / "a.txt").read_bytes() == b"1" and (
        tmp_path / "r2" / "s" / "b"
    ).read_bytes() == b"2"
    extract(_archive(("notes.txt", b"n")), tmp_path, "notes.txt", "renamed.txt")
    assert (tmp_path / "renamed.txt").read_bytes() == b"n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r2", "renamed.txt"]


def test_an_archive_cannot_write_outside_its_target(tmp_path: Path) -> None:
    """A node's tar is the tenant's code: a member that is not the copied path, or one that climbs out of
    it, is refused and nothing lands outside."""
    inside = tmp_path / "in"
    inside.mkdir()
    with pytest.raises(CopyError, match="not the copied path"):
        extract(_archive(("./a", b"1"), ("elsewhere", b"x")), inside, "results", "results")
    with pytest.raises(tarfile.OutsideDestinationError):
        extract(_archive(("./../../escaped", b"x")), inside, "results", "results")
    assert not (tmp_path / "escaped").exists() and not (inside / "elsewhere").exists()


def test_cp_needs_exactly_one_side_in_a_rental() -> None:
    result = CliRunner().invoke(app, ["cp", "a", "b"])
    assert result.exit_code == 2 and "SOURCE DEST: one of them is RENTAL:PATH" in result.output
    result = CliRunner().invoke(app, ["cp", "rnt_1:a", "rnt_2:b"])
    assert result.exit_code == 2
    result = CliRunner().invoke(app, ["cp", "a", "rnt_1:b", "--timeout", "9h"])
    assert result.exit_code == 2 and "--timeout" in result.output and "at most 8h" in result.output


def test_a_file_copy_cut_off_midway_leaves_the_earlier_local_copy_whole(tmp_path: Path) -> None:
    """A download cut off (its rental stopped mid-copy) overwrote an existing local file in place with the
    part that came; a file is now written beside its target and put in place only once whole."""
    (tmp_path / "big").write_bytes(b"the good copy")
    whole = _archive(("big", b"x" * 100_000)).getvalue()
    with pytest.raises(tarfile.TarError):
        extract(io.BytesIO(whole[:60_000]), tmp_path, "big", "big")
    assert [p.name for p in tmp_path.iterdir()] == ["big"]  # nothing half-written left beside it
    assert (tmp_path / "big").read_bytes() == b"the good copy"
    extract(io.BytesIO(whole), tmp_path, "big", "big")
    assert (tmp_path / "big").read_bytes() == b"x" * 100_000
    assert [p.name for p in tmp_path.iterdir()] == ["big"]
