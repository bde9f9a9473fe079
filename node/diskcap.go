package node

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"
)

// maxWorkers bounds Config.Workers: more fetches at once than this is a
// mistake on a volunteer's machine (and many connections).
const maxWorkers = 256

// diskEvery is how often the disk cap measures the data directory.
const diskEvery = 10 * time.Second

// diskCap is the crawler's hold check for Config.DiskCap: the data
// directory's blocks allocated on disk, measured at most every `every`.
// At the cap it holds the crawler, and it lets it go again below 95 % of
// the cap, so that crawling does not stop and start at every measurement
// near it.
type diskCap struct {
	dir   string
	limit int64
	every time.Duration

	mu      sync.Mutex
	at      time.Time // of the last measurement
	used    int64
	err     error // of the last measurement
	holding bool
}

// check returns an error while the data directory is at the cap; a
// directory that cannot be measured is reported as such and holds.
func (d *diskCap) check() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if now := time.Now(); d.at.IsZero() || now.Sub(d.at) >= d.every {
		d.at = now
		d.used, d.err = allocated(d.dir)
	}
	if d.err != nil {
		return fmt.Errorf("measuring the data directory for disk_cap: %w", d.err)
	}
	resume := d.limit - d.limit/20
	switch {
	case d.used >= d.limit:
		d.holding = true
	case d.used < resume:
		d.holding = false
	}
	if d.holding {
		return fmt.Errorf("disk cap reached: the data directory takes %s, disk_cap is %s (crawling resumes under %s)",
			humanize.IBytes(uint64(d.used)), humanize.IBytes(uint64(d.limit)), humanize.IBytes(uint64(resume)))
	}
	return nil
}

// allocated is what the files under dir take on disk: blocks allocated,
// not their length (badger's value log files are sparse).
func allocated(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			total += st.Blocks * 512
		} else {
			total += fi.Size()
		}
		return nil
	})
	return total, err
}
