// Package snapfile is the format of the file that WithSnapshot keeps: how
// it is written (atomically, readable by its owner only), found (through
// the symbolic links its owner trusts), checked (a regular file its owner
// wrote, of a size and a decoding cost within bounds) and read back.
package snapfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/svcdata"
)

const (
	// MaxAge is the age beyond which data is not loaded: addresses older
	// than a day are more likely to mislead than to help a process that
	// starts during a registry outage. It applies to the file, by the
	// time it was written, and to each service in it, by the time its
	// data was last refreshed from the registry.
	MaxAge = 24 * time.Hour

	// clockSkew is how far in the future a time in the file may
	// lie, for clocks that disagree a little or were stepped back: such a
	// time is read as now. Further in the future, nothing tells how old
	// the data is, so it is not loaded.
	clockSkew = 5 * time.Minute

	// format and version mark a file as ours, so that a
	// foreign JSON file is ignored rather than half read.
	format  = "regcache-snapshot"
	version = 1
	// maxSize bounds the bytes the loader reads; scan.go
	// bounds what they decode to.
	maxSize = 64 << 20
	// maxLinks bounds the symbolic links followed from the path.
	maxLinks = 40
)

// File is the on-disk form of the cache's data. New makes one.
type File struct {
	Format   string    `json:"format"`
	Version  int       `json:"version"`
	Written  time.Time `json:"written"`
	Services []Entry   `json:"services"`
}

// New returns an empty file, written at written.
func New(written time.Time) *File {
	return &File{Format: format, Version: version, Written: written}
}

// Entry is one service in a File: its data, and when the registry last
// told it.
type Entry struct {
	Name      string              `json:"name"`
	Refreshed time.Time           `json:"refreshed"`
	Services  []*registry.Service `json:"services"`
}

// loaded is one service read back from a snapshot file.
type Loaded struct {
	Name      string
	Services  []*registry.Service
	Refreshed time.Time
}

// parseSnapshot validates a snapshot file and returns its usable services,
// and how many it skipped because their data was older than
// MaxAge or dated in the future. It never panics, whatever data
// holds.
func Parse(data []byte, now time.Time) (_ []Loaded, skipped int, _ error) {
	var f File
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, 0, fmt.Errorf("not a readable snapshot: %w", err)
	}
	if f.Format != format || f.Version != version {
		return nil, 0, fmt.Errorf("not a regcache snapshot (format %q, version %d)", f.Format, f.Version)
	}
	if ahead := f.Written.Sub(now); ahead > clockSkew {
		return nil, 0, fmt.Errorf("written %v in the future, beyond the %v allowed for clock skew",
			ahead.Round(time.Second), clockSkew)
	}
	if age := now.Sub(f.Written); age > MaxAge {
		return nil, 0, fmt.Errorf("written %v ago, over the %v limit", age.Round(time.Second), MaxAge)
	}
	var out []Loaded
	seen := map[string]bool{}
	for _, e := range f.Services {
		if e.Name == "" || seen[e.Name] || e.Refreshed.IsZero() {
			continue
		}
		// A service read back and written again keeps its refresh
		// time, so a file rewritten every minute can still hold data a
		// month old: each service's age is checked, not only the file's.
		refreshed := e.Refreshed
		if refreshed.Sub(now) > clockSkew || now.Sub(refreshed) > MaxAge {
			skipped++
			continue
		}
		if refreshed.After(now) {
			refreshed = now
		}
		svcs, err := svcdata.CloneIn(e.Services)
		if err != nil || !svcdata.HasNodes(svcs) {
			continue
		}
		seen[e.Name] = true
		out = append(out, Loaded{Name: e.Name, Services: svcs, Refreshed: refreshed})
	}
	return out, skipped, nil
}

// readSnapshot reads, checks and parses the snapshot file at path.
func Read(path string, now time.Time) ([]Loaded, int, error) {
	target, err := ResolvePath(path)
	if err != nil {
		return nil, 0, err
	}
	f, err := open(target)
	if err != nil {
		if target != path && !errors.Is(err, os.ErrNotExist) {
			err = fmt.Errorf("%s: %w", target, err)
		}
		return nil, 0, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	if info.Size() > maxSize {
		return nil, 0, fmt.Errorf("larger than %d bytes", maxSize)
	}
	// Read into a buffer of the file's size, not one that doubles as it
	// fills. The cache replaces the file by renaming, so the file opened
	// does not change; one that does is refused.
	data := make([]byte, info.Size())
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, 0, err
	}
	if n, _ := f.Read(make([]byte, 1)); n > 0 {
		return nil, 0, errors.New("the file grew while it was read")
	}
	if err := scan(data); err != nil {
		return nil, 0, fmt.Errorf("too large to load: %w", err)
	}
	return Parse(data, now)
}

// resolveSnapshotPath follows the symbolic links at path, so that the file
// they lead to is read and replaced while the links stay: a link into a
// mounted volume keeps pointing at the data. A link must be owned by the
// process's user or root, or a link planted by another user could make
// the cache overwrite a file of its user's. A link to nothing resolves to
// the path it names, which the first write creates.
func ResolvePath(path string) (string, error) {
	for i := 0; i < maxLinks; i++ {
		info, err := os.Lstat(path)
		if errors.Is(err, os.ErrNotExist) || err == nil && info.Mode()&os.ModeSymlink == 0 {
			return path, nil
		}
		if err != nil {
			return "", err
		}
		if err := trustLink(info); err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		target, err := os.Readlink(path)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(path), target)
		}
		path = target
	}
	return "", fmt.Errorf("more than %d symbolic links", maxLinks)
}

// probeSnapshotPath creates and removes a file next to path, as a write
// of the snapshot would.
func Probe(path string) error {
	path, err := ResolvePath(path)
	if err != nil {
		return err
	}
	if info, err := os.Stat(path); err == nil && info.IsDir() {
		return fmt.Errorf("%s is a folder, not a file", path)
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	info, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !info.IsDir() {
		return fmt.Errorf("%s is not a folder", dir)
	}
	f, err := os.CreateTemp(dir, base+".check-*")
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}

// writeSnapshot replaces the file atomically: a temporary file in the same
// folder, written, synced and renamed over it, so that a reader (or
// another cache writing the same path) never sees a partial file. The mode
// is 0600 because the file lists the addresses of every service. A
// symbolic link at path is followed, and the file it leads to is replaced.
func Write(path string, f *File) (err error) {
	data, err := json.Marshal(f)
	if err != nil {
		return err
	}
	if path, err = ResolvePath(path); err != nil {
		return err
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, base+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(tmp.Name())
		}
	}()
	if err = tmp.Chmod(0o600); err == nil {
		if _, err = tmp.Write(data); err == nil {
			err = tmp.Sync()
		}
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync() // make the rename itself durable, where the OS allows
		d.Close()
	}
	return nil
}
