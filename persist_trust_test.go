//go:build unix

package cache

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/regcache/cache/internal/snapfile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"
)

// validSnapshot is a file holding service "a" with node "a1".
func validSnapshot(t *testing.T) []byte {
	t.Helper()
	now := time.Now()
	data, err := json.Marshal(fileOf(now, snapfile.Entry{Name: "a", Refreshed: now, Services: []*registry.Service{svc("a", "1", "a1")}}))
	require.NoError(t, err)
	return data
}

// loadFrom builds a cache over a failing registry from the snapshot at
// path, and returns its one log line and whether it loaded "a".
func loadFrom(t *testing.T, path string) (string, bool) {
	t.Helper()
	f := newFakeRegistry()
	f.Fail(errDown)
	c, l := newTestCache(t, f, WithSnapshot(path))
	defer c.Stop()
	lines := l.all()
	// The load's line, and New's warning when the path cannot be
	// written either.
	require.NotEmpty(t, lines)
	require.LessOrEqual(t, len(lines), 2, "%q", lines)
	_, err := c.Lookup("a")
	return lines[0], err == nil
}

// A FIFO at the path hung New forever: opening it for reading waits for a
// writer. Here a writer waits too, so that the old loader would read the
// valid file it sends rather than hang; the loader must refuse the FIFO
// without opening it for a blocking read.
func TestSnapshotAtAFIFOIsRefusedWithoutBlocking(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fifo")
	require.NoError(t, syscall.Mkfifo(path, 0o600))
	data := validSnapshot(t)
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		w, err := os.OpenFile(path, os.O_WRONLY, 0) // blocks until a reader opens
		if err == nil {
			_, _ = w.Write(data)
			w.Close()
		}
	}()

	line, loaded := loadFrom(t, path)
	assert.Contains(t, line, "ignoring snapshot "+path+": not a regular file (p---------)")
	assert.False(t, loaded)

	// Let the writer go: open, and close, a reader of our own.
	r, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	require.NoError(t, err)
	<-wrote
	r.Close()
}

// Without a writer, a blocking open of a FIFO never returns. Whether the
// loader blocks is told apart without a clock: a writer's non-blocking
// open succeeds only while a reader has the FIFO open, or waits in open for
// a writer. A loader that never blocks is seen to finish, in some of the
// tries, before any writer could get in; one that blocks finishes only
// after one did.
func TestSnapshotAtAFIFONeverBlocks(t *testing.T) {
	dir := t.TempDir()
	for try := 0; try < 50; try++ {
		path := filepath.Join(dir, fmt.Sprint("fifo-", try))
		require.NoError(t, syscall.Mkfifo(path, 0o600))
		done := make(chan error, 1)
		go func() {
			_, _, err := snapfile.Read(path, time.Now())
			done <- err
		}()
		for {
			select {
			case err := <-done:
				assert.ErrorContains(t, err, "not a regular file")
				return // finished with no writer ever in
			default:
			}
			w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0)
			if err == nil {
				w.Close() // a reader was there: this try tells nothing
				<-done
				break
			}
			runtime.Gosched()
		}
	}
	t.Fatal("in 50 tries, the loader finished only once a writer had opened the FIFO: it blocks")
}

// A link to a device is followed, and the device refused: /dev/zero would
// otherwise be read up to the size cap.
func TestSnapshotAtADeviceIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "zero")
	require.NoError(t, os.Symlink("/dev/zero", path))
	line, _ := loadFrom(t, path)
	assert.Contains(t, line, "ignoring snapshot "+path+": /dev/zero: not a regular file (Dc---------)")
}

// Like ssh with its keys, the loader refuses a file that another user could
// have written: the snapshot tells the next process where every service
// is.
func TestSnapshotOthersCanWriteIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name       string
		file, dir  os.FileMode
		want       string // in the log line; empty if loaded
		wantLoaded bool
	}{
		{"private", 0o600, 0o700, "", true},
		{"readable by all", 0o644, 0o755, "", true},
		{"group-writable file", 0o620, 0o700, "other users can write it (mode -rw--w----); it should be 0600", false},
		{"world-writable file", 0o606, 0o700, "other users can write it (mode -rw----rw-)", false},
		{"world-writable folder", 0o600, 0o777, "other users can write its folder %s (mode -rwxrwxrwx), and the folder is not sticky", false},
		{"group-writable folder", 0o600, 0o770, "other users can write its folder %s (mode -rwxrwx---)", false},
		{"sticky folder, as /tmp", 0o600, 0o777 | os.ModeSticky, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "d")
			require.NoError(t, os.Mkdir(dir, 0o700))
			path := filepath.Join(dir, "regcache.json")
			require.NoError(t, os.WriteFile(path, validSnapshot(t), 0o600))
			require.NoError(t, os.Chmod(path, tc.file))
			require.NoError(t, os.Chmod(dir, tc.dir))
			line, loaded := loadFrom(t, path)
			assert.Equal(t, tc.wantLoaded, loaded, line)
			if tc.want != "" {
				want := tc.want
				if strings.Contains(want, "%s") {
					want = strings.Replace(want, "%s", dir, 1)
				}
				assert.Contains(t, line, "ignoring snapshot "+path+": "+want)
			}
		})
	}
}

// Files, folders and links owned by another user are refused; only root
// can make them, so this runs as root only.
func TestSnapshotOwnedByAnotherUserIsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files away")
	}
	const nobody = 65534
	setup := func(t *testing.T) (dir, path string) {
		dir = filepath.Join(t.TempDir(), "d")
		require.NoError(t, os.Mkdir(dir, 0o755))
		path = filepath.Join(dir, "regcache.json")
		require.NoError(t, os.WriteFile(path, validSnapshot(t), 0o600))
		return dir, path
	}
	t.Run("file", func(t *testing.T) {
		_, path := setup(t)
		require.NoError(t, os.Chown(path, nobody, nobody))
		line, loaded := loadFrom(t, path)
		assert.False(t, loaded)
		assert.Contains(t, line, "ignoring snapshot "+path+": the file is owned by user 65534, not by this process's user 0")
	})
	t.Run("folder", func(t *testing.T) {
		dir, path := setup(t)
		require.NoError(t, os.Chown(dir, nobody, nobody))
		line, loaded := loadFrom(t, path)
		assert.False(t, loaded)
		assert.Contains(t, line, "its folder "+dir+" is owned by user 65534")
	})
	t.Run("link", func(t *testing.T) {
		dir, path := setup(t)
		link := filepath.Join(dir, "link")
		require.NoError(t, os.Symlink(path, link))
		require.NoError(t, os.Lchown(link, nobody, nobody))
		line, loaded := loadFrom(t, link)
		assert.False(t, loaded)
		assert.Contains(t, line, "ignoring snapshot "+link+": "+link+": the symbolic link is owned by user 65534")

		// Nor is it followed to write: it could lead to any file of ours.
		assert.ErrorContains(t, snapfile.Write(link, &snapfile.File{}), "the symbolic link is owned by user 65534")
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		assert.Equal(t, validSnapshot(t)[:20], data[:20], "the file the link leads to is untouched")
	})
	t.Run("own file", func(t *testing.T) {
		_, path := setup(t)
		_, loaded := loadFrom(t, path)
		assert.True(t, loaded)
	})
}

// A link at the path, into a mounted volume say, is followed: the file it
// leads to is read and replaced, and the link stays.
func TestSnapshotLinkIsFollowedAndKept(t *testing.T) {
	for _, tc := range []struct {
		name   string
		exists bool
	}{{"to a file", true}, {"to no file yet", false}} {
		t.Run(tc.name, func(t *testing.T) {
			volume := t.TempDir()
			target := filepath.Join(volume, "regcache.json")
			if tc.exists {
				require.NoError(t, os.WriteFile(target, []byte("{}"), 0o600))
			}
			link := filepath.Join(t.TempDir(), "regcache.json")
			rel, err := filepath.Rel(filepath.Dir(link), target)
			require.NoError(t, err)
			require.NoError(t, os.Symlink(rel, link)) // relative, as links into volumes often are

			f := newFakeRegistry()
			f.SetNodes("a", "a1")
			c, _ := newTestCache(t, f, WithSnapshot(link))
			_, err = c.Lookup("a")
			require.NoError(t, err)
			c.Stop()

			info, err := os.Lstat(link)
			require.NoError(t, err)
			assert.Equal(t, os.ModeSymlink, info.Mode().Type(), "the link is still a link")
			assert.Equal(t, "a", readSnapshotFile(t, target).Services[0].Name, "the file it leads to was written")
			matches, _ := filepath.Glob(filepath.Join(volume, "*.tmp-*"))
			assert.Empty(t, matches)

			f.Fail(errDown)
			line, loaded := loadFrom(t, link)
			assert.True(t, loaded, line)
		})
	}
}

func TestSnapshotLinkLoopIsRefused(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	require.NoError(t, os.Symlink(b, a))
	require.NoError(t, os.Symlink(a, b))
	line, _ := loadFrom(t, a)
	assert.Contains(t, line, "ignoring snapshot "+a+": more than 40 symbolic links")
}
