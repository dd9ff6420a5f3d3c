package storm

import (
	"fmt"
	"io"
	"time"
)

// progressLine writes where the run is: a line per scenario, and a status
// line every second, redrawn in place on a terminal and every five seconds
// otherwise.
type progressLine struct {
	w     io.Writer
	tty   bool
	total time.Duration
	open  bool // a redrawn line is on screen
}

func (p *progressLine) phase(i int, elapsed time.Duration) {
	p.clear()
	fmt.Fprintf(p.w, "[%5.1fs/%v] %d/%d %s\n", elapsed.Seconds(), p.total, i+1, len(script), script[i].title)
}

func (p *progressLine) clear() {
	if p.open {
		fmt.Fprint(p.w, "\r\033[K")
		p.open = false
	}
}

// wait writes the status line until deadline; status says how many calls
// were made so far.
func (p *progressLine) wait(deadline, start time.Time, phase int, status func() string) {
	every := 5 * time.Second
	if p.tty {
		every = time.Second
	}
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return
		}
		time.Sleep(min(left, every))
		left = time.Until(deadline)
		if left <= 0 {
			return
		}
		line := fmt.Sprintf("[%5.1fs/%v] %s, %.0fs left; %s",
			time.Since(start).Seconds(), p.total, script[phase].title, left.Seconds(), status())
		if p.tty {
			fmt.Fprint(p.w, "\r\033[K"+line)
			p.open = true
		} else {
			fmt.Fprintln(p.w, line)
		}
	}
}

func (p *progressLine) done(elapsed time.Duration) {
	p.clear()
	fmt.Fprintf(p.w, "[%5.1fs/%v] done\n", elapsed.Seconds(), p.total)
}
