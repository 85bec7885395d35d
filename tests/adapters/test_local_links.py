"""Local scans follow symlinked folders, as energon's EPath does, and do not enter a folder that links back to its
own ancestor (it would be walked forever)."""

from __future__ import annotations

import os

import pytest

from energon_arrow.adapters.storage import Storage
from energon_arrow.epathlib import EPath

# every file of the `linked` layout, the linked folder's under the link's name
LISTED = ["file.txt", "subdir/file2.txt", "subdir/file3.blob", "symlink/file2.txt", "symlink/file3.blob"]


@pytest.fixture
def linked(tmp_path):
    """root/file.txt, root/subdir/{file2.txt, file3.blob}, root/symlink -> root/subdir (energon's test layout)."""
    root = tmp_path / "root"
    (root / "subdir").mkdir(parents=True)
    (root / "file.txt").write_text("dummy")
    (root / "subdir" / "file2.txt").write_text("dummy")
    (root / "subdir" / "file3.blob").write_text("dummy")
    (root / "symlink").symlink_to(root / "subdir", target_is_directory=True)
    return root


def test_scan_lists_files_under_a_linked_folder_by_the_links_name(linked):
    assert Storage(str(linked)).list_files("**/*") == LISTED


def test_epath_walk_and_glob_follow_links_as_energons(linked):
    root = EPath(str(linked))
    assert [str(p) for p in sorted(root.walk())] == [
        f"{linked}/file.txt",
        f"{linked}/subdir/file2.txt",
        f"{linked}/subdir/file3.blob",
        f"{linked}/symlink/file2.txt",
        f"{linked}/symlink/file3.blob",
    ]
    assert [str(p) for p in sorted(root.glob("**/*.txt"))] == [
        f"{linked}/file.txt",
        f"{linked}/subdir/file2.txt",
        f"{linked}/symlink/file2.txt",
    ]
    assert [str(p) for p in sorted((root / "symlink").walk())] == [
        f"{linked}/symlink/file2.txt",
        f"{linked}/symlink/file3.blob",
    ]


def test_a_folder_linking_back_to_its_ancestor_is_not_entered(linked):
    """A loop anywhere below a scanned folder (a leftover under /tmp) must not stop the scan or list its files
    again and again."""
    os.symlink(linked, linked / "subdir" / "back", target_is_directory=True)
    assert Storage(str(linked)).list_files("**/*") == LISTED
