"""Writing inside the target root without leaving it, losing bytes or changing ownership.

Every write into the target goes through :class:`RootWriter`. It holds a descriptor of the
resolved root and reaches each file by walking its folders one at a time with
``O_NOFOLLOW | O_DIRECTORY``, so a folder swapped for a symlink while porter runs is refused
instead of followed. An existing file is replaced atomically (a temporary file in the same
folder, then ``rename``) only when:

- it is still the file porter read (same content hash; same inode, size and mtime just
  before the rename): another process's edit is never overwritten;
- it is a plain regular file with one link: replacing a hard-linked file would split the
  link, so porter refuses it;
- its owner may write it (``u+w``): porter does not rewrite read-only files;
- the new file gets the old one's permission bits, owner and group (as root, ``fchown``);
  a non-root user cannot give a file away, so a file owned by someone else is refused.

A refusal or an I/O error (full disk, immutable file) is a :class:`WriteRefused` for that
file only; the caller reports it and goes on with the next file.
"""

from __future__ import annotations

import errno
import hashlib
import os
import secrets
import stat
from pathlib import PurePosixPath

_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class WriteRefused(Exception):
    """porter did not write this file; ``reason`` says why (for a per-file finding)."""

    def __init__(self, relpath: str, reason: str) -> None:
        super().__init__(f"{relpath}: {reason}")
        self.relpath = relpath
        self.reason = reason


def content_digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def check_relpath(relpath: str) -> tuple[str, ...]:
    """The components of a root-relative '/'-path; ValueError for anything that could leave the root."""
    if not relpath or "\0" in relpath or (os.sep != "/" and "\\" in relpath):
        raise ValueError(f"not a plain relative path: {relpath!r}")
    pure = PurePosixPath(relpath)
    if pure.is_absolute() or any(part in ("..", ".", "") for part in relpath.split("/")):
        raise ValueError(f"not a plain relative path: {relpath!r}")
    return pure.parts


def _why(exc: OSError) -> str:
    if exc.errno == errno.ENOSPC:
        return "no space left on the device"
    if exc.errno in (errno.EPERM, errno.EACCES):
        return f"permission denied ({exc.strerror})"
    if exc.errno == errno.EROFS:
        return "read-only file system"
    return exc.strerror or str(exc)


class RootWriter:
    """Writes files under one root, reached only through descriptors opened without following symlinks."""

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        self._root_fd = os.open(self.root, _DIR_FLAGS)

    def close(self) -> None:
        if self._root_fd >= 0:
            os.close(self._root_fd)
            self._root_fd = -1

    def __enter__(self) -> RootWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- folders ---------------------------------------------------------------------------
    def _parent(self, relpath: str, create: bool) -> tuple[int, str]:
        try:
            parts = check_relpath(relpath)
        except ValueError as exc:
            raise WriteRefused(relpath, f"refusing to write outside the root ({exc})") from None
        fd = os.dup(self._root_fd)
        try:
            for part in parts[:-1]:
                try:
                    nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise WriteRefused(relpath, "its folder vanished during the run") from None
                    os.mkdir(part, 0o777, dir_fd=fd)
                    nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise WriteRefused(relpath, f"`{part}` on its path is a symlink or not a folder; "
                                           "porter never writes through one") from None
                    raise
                os.close(fd)
                fd = nfd
        except BaseException:
            os.close(fd)
            raise
        return fd, parts[-1]

    # -- files -----------------------------------------------------------------------------
    def replace(self, relpath: str, data: bytes, expected_digest: str | None) -> None:
        """Replace an existing file with ``data`` (see the module docstring for the conditions)."""
        try:
            dfd, name = self._parent(relpath, create=False)
        except OSError as exc:
            raise WriteRefused(relpath, f"not written: {_why(exc)}") from None
        try:
            self._replace_in(dfd, name, relpath, data, expected_digest)
        except OSError as exc:
            raise WriteRefused(relpath, f"not written: {_why(exc)}") from None
        finally:
            os.close(dfd)

    def _replace_in(self, dfd: int, name: str, relpath: str, data: bytes, expected_digest: str | None) -> None:
        st = self._check_existing(dfd, name, relpath)
        if expected_digest is not None:
            self._check_unchanged(dfd, name, relpath, st, expected_digest)
        tmp = self._write_temp(dfd, data, st, relpath)
        try:
            # last look: the file must still be the one whose content was checked
            now = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            if _identity(now) != _identity(st):
                raise WriteRefused(relpath, "changed on disk while porter ran; not written (run porter again)")
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            _unlink_quietly(tmp, dfd)
            raise

    def create(self, relpath: str, data: bytes) -> bool:
        """Create a new file (folders as needed); False when a regular file of that name exists already."""
        try:
            dfd, name = self._parent(relpath, create=True)
        except OSError as exc:
            raise WriteRefused(relpath, f"not created: {_why(exc)}") from None
        try:
            try:
                there = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                there = None
            if there is not None:
                if stat.S_ISREG(there.st_mode):
                    return False  # a file of that name appeared: reuse it, never replace it
                raise WriteRefused(relpath, "not created: a symlink or folder is already there; porter neither "
                                   "replaces nor follows it")
            tmp = self._write_temp(dfd, data, None, relpath)
            try:
                # link() fails when the name appeared meanwhile: never replaces anything
                os.link(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
            except FileExistsError:
                raise WriteRefused(relpath, "not created: something appeared at this path during the run") from None
            except OSError as exc:
                if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
                    raise
                self._create_exclusive(dfd, name, data, relpath)  # a file system without hard links
            finally:
                _unlink_quietly(tmp, dfd)
            return True
        except OSError as exc:
            raise WriteRefused(relpath, f"not created: {_why(exc)}") from None
        finally:
            os.close(dfd)

    @staticmethod
    def _create_exclusive(dfd: int, name: str, data: bytes, relpath: str) -> None:
        try:
            umask = os.umask(0)
            os.umask(umask)
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o666 & ~umask,
                         dir_fd=dfd)
        except FileExistsError:
            raise WriteRefused(relpath, "not created: something appeared at this path during the run") from None
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            _unlink_quietly(name, dfd)
            raise
        os.close(fd)

    def put(self, relpath: str, data: bytes) -> None:
        """Create or replace porter's own file (the cache), folders as needed, never through a symlink."""
        try:
            dfd, name = self._parent(relpath, create=True)
        except OSError as exc:
            raise WriteRefused(relpath, f"not written: {_why(exc)}") from None
        try:
            tmp = self._write_temp(dfd, data, None, relpath)
            try:
                os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)  # replaces a symlink, never follows it
            except BaseException:
                _unlink_quietly(tmp, dfd)
                raise
        except OSError as exc:
            raise WriteRefused(relpath, f"not written: {_why(exc)}") from None
        finally:
            os.close(dfd)

    def delete(self, relpath: str, expected_digest: str | None) -> None:
        """Remove a regular file (a HIPify rename) when it is still the file porter read."""
        try:
            dfd, name = self._parent(relpath, create=False)
        except OSError as exc:
            raise WriteRefused(relpath, f"not removed: {_why(exc)}") from None
        try:
            st = self._check_existing(dfd, name, relpath, for_delete=True)
            if expected_digest is not None:
                self._check_unchanged(dfd, name, relpath, st, expected_digest)
            os.unlink(name, dir_fd=dfd)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise WriteRefused(relpath, f"not removed: {_why(exc)}") from None
        finally:
            os.close(dfd)

    # -- checks ----------------------------------------------------------------------------
    @staticmethod
    def _check_existing(dfd: int, name: str, relpath: str, for_delete: bool = False) -> os.stat_result:
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            raise WriteRefused(relpath, "vanished during the run; not written") from None
        if stat.S_ISLNK(st.st_mode):
            raise WriteRefused(relpath, "is a symlink; porter never writes through one")
        if not stat.S_ISREG(st.st_mode):
            raise WriteRefused(relpath, "is no longer a regular file; not written")
        if st.st_nlink > 1:
            raise WriteRefused(relpath, f"has {st.st_nlink} hard links; replacing it would split them, so porter "
                               "left it unchanged (apply the diff from `porter apply --dry-run` by hand)")
        if not for_delete and not st.st_mode & stat.S_IWUSR:
            raise WriteRefused(relpath, "is read-only; porter does not rewrite read-only files "
                               "(make it writable, or apply the diff by hand)")
        euid = os.geteuid() if hasattr(os, "geteuid") else None
        if euid not in (None, 0) and st.st_uid != euid:
            raise WriteRefused(relpath, f"belongs to another user (uid {st.st_uid}); replacing it would change "
                               "its owner, so porter left it unchanged")
        return st

    @staticmethod
    def _check_unchanged(dfd: int, name: str, relpath: str, st: os.stat_result, expected: str) -> None:
        changed = WriteRefused(relpath, "changed on disk while porter ran; not written (run porter again)")
        try:
            fd = os.open(name, os.O_RDONLY | _NOFOLLOW | _CLOEXEC | getattr(os, "O_NONBLOCK", 0), dir_fd=dfd)
        except OSError:
            raise changed from None
        try:
            if _identity(os.fstat(fd)) != _identity(st):
                raise changed
            chunks = []
            limit = st.st_size + 1
            while limit > 0:
                chunk = os.read(fd, min(limit, 1 << 20))
                if not chunk:
                    break
                chunks.append(chunk)
                limit -= len(chunk)
        finally:
            os.close(fd)
        if content_digest(b"".join(chunks)) != expected:
            raise changed

    @staticmethod
    def _write_temp(dfd: int, data: bytes, like: os.stat_result | None, relpath: str) -> str:
        for _ in range(100):
            tmp = f".porter-{secrets.token_hex(6)}.tmp"
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o600, dir_fd=dfd)
                break
            except FileExistsError:
                continue
        else:  # pragma: no cover - 100 collisions of 48 random bits
            raise WriteRefused(relpath, "could not create a temporary file")
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
            if like is not None:
                tst = os.fstat(fd)
                if (tst.st_uid, tst.st_gid) != (like.st_uid, like.st_gid):
                    try:
                        os.fchown(fd, like.st_uid, like.st_gid)
                    except PermissionError:
                        raise WriteRefused(relpath, f"porter cannot give the new file the owner/group of the old "
                                           f"one ({like.st_uid}:{like.st_gid}); left unchanged") from None
                os.fchmod(fd, stat.S_IMODE(like.st_mode))
            else:
                umask = os.umask(0)
                os.umask(umask)
                os.fchmod(fd, 0o666 & ~umask)
        except BaseException:
            os.close(fd)
            _unlink_quietly(tmp, dfd)
            raise
        os.close(fd)
        return tmp


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _unlink_quietly(name: str, dfd: int) -> None:
    try:
        os.unlink(name, dir_fd=dfd)
    except OSError:
        pass
