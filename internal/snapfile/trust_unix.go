//go:build unix

package snapfile

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// openSnapshot opens the snapshot file for reading and checks that it is
// one the cache may trust, as ssh checks its keys:
//   - a regular file: the file is opened without blocking and checked
//     through the open descriptor, so that a FIFO or a device put at the
//     path, even between a check and the open, never hangs New;
//   - owned by the user the process runs as, or by root;
//   - writable by no other user;
//   - in a folder that is owned by that user or root, and that no other
//     user can write, unless the folder is sticky (as /tmp is), where
//     other users cannot replace a file they do not own.
//
// path has had its symbolic links resolved (see resolveSnapshotPath).
func open(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if err := trustFile(f); err != nil {
		f.Close()
		return nil, err
	}
	if err := trustFolder(filepath.Dir(path)); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func trustFile(f *os.File) error {
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("not a regular file (%v)", info.Mode().Type())
	}
	if err := trustOwner(info, "the file"); err != nil {
		return err
	}
	if info.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("other users can write it (mode %v); it should be 0600", info.Mode().Perm())
	}
	return nil
}

func trustFolder(dir string) error {
	info, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if err := trustOwner(info, "its folder "+dir); err != nil {
		return err
	}
	if info.Mode().Perm()&0o022 != 0 && info.Mode()&os.ModeSticky == 0 {
		return fmt.Errorf("other users can write its folder %s (mode %v), and the folder is not sticky",
			dir, info.Mode().Perm())
	}
	return nil
}

// trustOwner accepts what the process's user or root owns.
func trustOwner(info os.FileInfo, what string) error {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if uid := int(st.Uid); uid != os.Geteuid() && uid != 0 {
		return fmt.Errorf("%s is owned by user %d, not by this process's user %d", what, uid, os.Geteuid())
	}
	return nil
}

// trustLink accepts a symbolic link at the snapshot path only if the
// process's user or root owns it, as for the file.
func trustLink(info os.FileInfo) error {
	return trustOwner(info, "the symbolic link")
}
