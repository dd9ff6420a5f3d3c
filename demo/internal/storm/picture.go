package storm

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// The picture's size and resolution, and its layout, top to bottom: a
// header, the scenarios' names, a row per client, and the client path's
// panel. Lengths are in points (1/72 in).
const (
	pictureWidth = 10 * vg.Inch
	pictureDPI   = 120
	margin       = 0.2 * vg.Inch
	headerHeight = 1.0 * vg.Inch
	namesHeight  = 0.4 * vg.Inch  // two lines of a scenario's name
	unitWidth    = 0.3 * vg.Inch  // the rows' unit, left of their axes
	labelHeight  = 0.38 * vg.Inch // a row's name, above it
	rowHeight    = 1.35 * vg.Inch // a row's plot, its time axis included
	xLabelHeight = 0.3 * vg.Inch  // the time axis's label, under the last row
	gapHeight    = 0.3 * vg.Inch  // between the rows and the client path
	rpcHead      = 0.6 * vg.Inch  // the client path's title and legend
	rpcHeight    = 2.2 * vg.Inch  // its plots
)

var (
	callsColor  = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff} // blue
	failedColor = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff} // red
	// Selector colours, in the order of the client path's rows.
	selectorColors = []color.Color{
		color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, // orange
		callsColor,
		color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, // green
		color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}, // purple
		color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff}, // brown
	}
	shade     = color.Gray{Y: 0xee}                            // every other scenario
	downShade = color.RGBA{R: 0xff, G: 0xf0, B: 0xc8, A: 0xff} // the registry down
	// failedFill fills the area under a warm instance's failed lookups.
	failedFill = color.NRGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0x40}
	inkColor   = color.Gray{Y: 0x22}
	greyInk    = color.Gray{Y: 0x66}
)

// fonts are the picture's: Liberation Sans, which gonum/plot embeds, so
// that the picture needs nothing from the machine.
var (
	sans    = font.Font{Typeface: "Liberation", Variant: "Sans"}
	bold    = font.Font{Typeface: "Liberation", Variant: "Sans", Weight: 700}
	handler = text.Plain{Fonts: font.DefaultCache}
)

func textStyle(f font.Font, size vg.Length, c color.Color) draw.TextStyle {
	return draw.TextStyle{Color: c, Font: font.From(f, size), Handler: handler}
}

// SavePicture writes r's picture (WritePicture) to the file path, and
// removes what it wrote if it fails.
func SavePicture(path string, r *Report) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = WritePicture(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("write the picture: %w", err)
	}
	return nil
}

// WritePicture draws r as a PNG: a row per client of the lookup scenarios,
// with its registry calls and failed lookups per second over the run, the
// scenarios shaded and named; then the client path, failed RPCs and
// attempts to the dead node per second, a line per selector. It draws the
// counts of the tables, slot by slot (CheckPicture).
func WritePicture(w io.Writer, r *Report) error {
	if r.Slot <= 0 {
		return fmt.Errorf("picture: the report has no time slots")
	}
	c := chartOf(r)
	var lookupEnd time.Duration
	for p, sp := range c.spans {
		if p != ClientPath {
			lookupEnd = max(lookupEnd, sp.to)
		}
	}
	if lookupEnd == 0 || len(c.clients) == 0 {
		return fmt.Errorf("picture: the report has no lookup scenario")
	}
	rowsHeight := namesHeight + vg.Length(len(c.clients))*(labelHeight+rowHeight) + xLabelHeight
	height := 2*margin + headerHeight + rowsHeight
	if len(c.rpc) > 0 {
		height += gapHeight + rpcHead + rpcHeight
	}
	img := vgimg.NewWith(vgimg.UseWH(pictureWidth, height), vgimg.UseDPI(pictureDPI))
	dc := draw.New(img)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	dc = draw.Crop(dc, margin, -margin, margin, -margin)

	top := dc.Max.Y
	header(strip(dc, top, headerHeight), r)
	top -= headerHeight
	lookupRows(strip(dc, top, rowsHeight), c, r, lookupEnd)
	top -= rowsHeight + gapHeight
	if len(c.rpc) > 0 {
		rpcPanel(strip(dc, top, rpcHead+rpcHeight), c, r)
	}
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}

// strip is the part of c from top down, height high.
func strip(c draw.Canvas, top, height vg.Length) draw.Canvas {
	c.Min.Y, c.Max.Y = top-height, top
	return c
}

// header writes the picture's title and the legend of the lookup rows.
func header(c draw.Canvas, r *Report) {
	cfg := r.Config
	top := c.Max.Y
	title := textStyle(bold, 15, inkColor)
	title.YAlign = draw.YTop
	c.FillText(title, vg.Point{X: c.Min.X, Y: top}, "regcache demo: each client's registry calls and failed lookups, over the run")
	sub := textStyle(sans, 11, greyInk)
	sub.YAlign = draw.YTop
	c.FillText(sub, vg.Point{X: c.Min.X, Y: top - 21}, fmt.Sprintf(
		"%d callers per client; %d services in %s, %v a call (%v while slow); a step is %v",
		cfg.Concurrency, cfg.Services, shortBackend(r.Backend), cfg.Latency, cfg.Slow, r.Slot))
	legend(c, vg.Point{X: c.Min.X, Y: top - 40}, []legendEntry{
		{"registry calls per second", callsColor, false},
		{"failed lookups per second", failedColor, false},
		{"dashed: the cold instance, started in the outage with nothing cached", greyInk, true},
	})
	c.FillText(sub, vg.Point{X: c.Min.X, Y: top - 58},
		"In the outage a cold instance fails every lookup; regcache's fails each at once, without a registry call, so its callers make more of them.")
}

// shortBackend is the registry's name without its details: "go-micro's
// in-memory registry", "embedded etcd 3.5".
func shortBackend(s string) string {
	s, _, _ = strings.Cut(s, " (")
	s, _, _ = strings.Cut(s, " on ")
	return s
}

type legendEntry struct {
	label  string
	color  color.Color
	dashed bool
}

// legend draws entries in a row from at: a short line, then its label.
func legend(c draw.Canvas, at vg.Point, entries []legendEntry) {
	sty := textStyle(sans, 11, inkColor)
	sty.YAlign = draw.YTop
	x := at.X
	for _, e := range entries {
		ls := lineStyle(e.color, e.dashed)
		ls.Width = vg.Points(2)
		y := at.Y - 7
		c.StrokeLine2(ls, x, y, x+22, y)
		x += 27
		c.FillText(sty, vg.Point{X: x, Y: at.Y}, e.label)
		x += sty.Width(e.label) + 18
	}
}

func lineStyle(c color.Color, dashed bool) draw.LineStyle {
	ls := draw.LineStyle{Color: c, Width: vg.Points(1.2)}
	if dashed {
		ls.Dashes = []vg.Length{vg.Points(4), vg.Points(2.5)}
	}
	return ls
}

// lookupRows draws a row per client over the lookup scenarios, on one
// time axis and one logarithmic rate axis, and the scenarios' names above
// the first row.
func lookupRows(area draw.Canvas, c chart, r *Report, end time.Duration) {
	ceiling := 10.0
	for _, cl := range c.clients {
		for _, l := range cl.lines {
			for _, s := range l.steps {
				ceiling = max(ceiling, s.rate())
			}
		}
	}
	ceiling = math.Pow(10, math.Ceil(math.Log10(ceiling)))
	spans := c.spans[:min(len(c.spans), ClientPath)]

	var plots [][]*plot.Plot
	for i, cl := range c.clients {
		p := newPlot()
		p.X.Min, p.X.Max = 0, end.Seconds()
		p.Y.Min, p.Y.Max = rateFloor, ceiling
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.TickerFunc(logTicks)
		if i == len(c.clients)-1 {
			p.X.Label.Text = "seconds since the start of the run"
		} else {
			p.X.Tick.Marker = unlabelled{}
		}
		p.Add(&bands{spans: spans, down: downScenario(r)})
		for _, l := range cl.lines {
			colour, fill := callsColor, color.Color(nil)
			if l.what == failedLookups {
				colour = failedColor
				if !l.cold {
					fill = failedFill
				}
			}
			addSteps(p, l.steps, lineStyle(colour, l.cold), fill, true)
		}
		plots = append(plots, []*plot.Plot{p})
	}
	// gonum centres an axis label on the middle of the data, which a
	// logarithmic axis puts near its top: the unit is written here.
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadY: labelHeight, PadLeft: unitWidth}
	rows := draw.Crop(area, 0, 0, 0, -(namesHeight + labelHeight))
	canvases := plot.Align(plots, tiles, rows)
	name := textStyle(bold, 13, inkColor)
	name.YAlign = draw.YBottom
	note := textStyle(sans, 11, greyInk)
	note.YAlign = draw.YBottom
	unit := textStyle(sans, 11, inkColor)
	unit.Rotation, unit.XAlign, unit.YAlign = math.Pi/2, draw.XCenter, draw.YTop
	for i, cl := range c.clients {
		p, pc := plots[i][0], canvases[i][0]
		p.Draw(pc)
		data := p.DataCanvas(pc)
		data.FillText(unit, vg.Point{X: area.Min.X, Y: (data.Min.Y + data.Max.Y) / 2}, "per second")
		at := vg.Point{X: data.Min.X, Y: data.Max.Y + 12}
		data.FillText(name, at, cl.client)
		if n := r.Notes[cl.client]; n != "" {
			data.FillText(note, vg.Point{X: at.X + name.Width(cl.client) + 10, Y: at.Y + 1}, n)
		}
		if i == 0 {
			scenarioNames(data, p, spans, area.Max.Y-namesHeight)
		}
	}
}

// downScenario is the lookup scenario in which the registry is down.
func downScenario(r *Report) int {
	if len(r.Scenarios) > Outage {
		return Outage
	}
	return -1
}

// scenarioNames writes each scenario's number and title centred over its
// span, from y up, on two lines where one does not fit.
func scenarioNames(data draw.Canvas, p *plot.Plot, spans []span, y vg.Length) {
	sty := textStyle(sans, 11, inkColor)
	sty.XAlign = draw.XCenter
	sty.YAlign = draw.YBottom
	x, _ := p.Transforms(&data)
	for i, sp := range spans {
		from, to := x(sp.from.Seconds()), x(sp.to.Seconds())
		name := fmt.Sprintf("%d. %s", i+1, sp.title)
		if sty.Width(name) > to-from-4 {
			name = breakLine(name)
		}
		data.FillText(sty, vg.Point{X: (from + to) / 2, Y: y}, name)
	}
}

// breakLine breaks s in two lines, at the space nearest its middle.
func breakLine(s string) string {
	best := -1
	for i, r := range s {
		if r == ' ' && (best < 0 || abs(i-len(s)/2) < abs(best-len(s)/2)) {
			best = i
		}
	}
	if best < 0 {
		return s
	}
	return s[:best] + "\n" + s[best+1:]
}

func abs(n int) int { return max(n, -n) }

// rpcPanel draws the client path: failed RPCs and attempts to the dead
// node per second, a line per selector, from the scenario's start, with
// the kill marked.
func rpcPanel(area draw.Canvas, c chart, r *Report) {
	sc := &r.Scenarios[ClientPath]
	top := area.Max.Y
	title := textStyle(bold, 13, inkColor)
	title.YAlign = draw.YTop
	head := fmt.Sprintf("%d. %s", ClientPath+1, sc.Title)
	area.FillText(title, vg.Point{X: area.Min.X, Y: top}, head)
	note := textStyle(sans, 11, greyInk)
	note.YAlign = draw.YTop
	area.FillText(note, vg.Point{X: area.Min.X + title.Width(head) + 10, Y: top - 1},
		fmt.Sprintf("go-micro RPCs, %d a second through each selector, to %d instances; shaded: one of them killed, and the registry down",
			r.Config.RPCRate, rpcInstances))
	var entries []legendEntry
	selectors := map[string]color.Color{}
	for _, l := range c.rpc {
		if _, ok := selectors[l.who]; !ok {
			selectors[l.who] = selectorColors[len(entries)%len(selectorColors)]
			entries = append(entries, legendEntry{label: l.who, color: selectors[l.who]})
		}
	}
	legend(area, vg.Point{X: area.Min.X, Y: top - 20}, entries)

	var plots []*plot.Plot
	for _, what := range []measure{failedRPCs, deadAttempts} {
		// The axis reaches at least one count per step: a line at zero
		// is then on the axis, not in the middle of a made-up range.
		ceiling := 1 / r.Slot.Seconds()
		for _, l := range c.rpc {
			for _, s := range l.steps {
				if l.what == what {
					ceiling = max(ceiling, s.rate())
				}
			}
		}
		p := newPlot()
		p.Title.Text = what.String()
		p.Title.TextStyle = textStyle(bold, 11, inkColor)
		p.Title.TextStyle.XAlign, p.Title.TextStyle.YAlign = draw.XCenter, draw.YTop
		p.X.Min, p.X.Max = sc.Began.Seconds(), sc.Ended.Seconds()
		p.X.Label.Text = "seconds since the start of the run"
		p.Y.Min, p.Y.Max = 0, ceiling*1.05
		p.Y.Label.Text = "per second"
		p.Add(&bands{spans: []span{{from: c.kill, to: sc.Ended}}, down: 0})
		for _, l := range c.rpc {
			if l.what == what {
				addSteps(p, l.steps, lineStyle(selectors[l.who], false), nil, false)
			}
		}
		plots = append(plots, p)
	}
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: 0.5 * vg.Inch}
	canvases := plot.Align([][]*plot.Plot{plots}, tiles, draw.Crop(area, 0, 0, 0, -rpcHead))
	for i, p := range plots {
		p.Draw(canvases[0][i])
	}
}

func newPlot() *plot.Plot {
	p := plot.New()
	p.BackgroundColor = color.Transparent
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle = textStyle(sans, 11, inkColor)
		a.Tick.Label = textStyle(sans, 10, inkColor)
		a.Color, a.Tick.Color = greyInk, greyInk
	}
	p.X.Label.Padding = 2
	return p
}

// rateFloor is where a rate of zero is drawn on the logarithmic axis,
// labelled 0: below the least rate above zero, one call in a slot.
const rateFloor = 1.0

// logTicks marks the logarithmic axis at 0 (the floor) and every power of
// ten, with minor marks in between.
func logTicks(lo, hi float64) []plot.Tick {
	ticks := []plot.Tick{{Value: rateFloor, Label: "0"}}
	for d := 10.0; d <= hi*1.0001; d *= 10 {
		for k := 2.0; k < 10; k++ {
			if v := d / 10 * k; v > 10 && v < hi { // none between 0 and 10
				ticks = append(ticks, plot.Tick{Value: v})
			}
		}
		ticks = append(ticks, plot.Tick{Value: d, Label: siCount(d)})
	}
	return ticks
}

// siCount prints a power of ten: 10, 100, 1k, 10k, 1M.
func siCount(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// unlabelled is the default ticks without labels: the rows above the last
// share its time axis.
type unlabelled struct{}

func (unlabelled) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ticks {
		ticks[i].Label = ""
	}
	return ticks
}

// addSteps adds a step line of the rates of steps, one segment per run of
// adjacent steps, the area under it filled with fill if it is not nil. On
// a logarithmic axis (log), a rate of zero is drawn at rateFloor.
func addSteps(p *plot.Plot, steps []step, ls draw.LineStyle, fill color.Color, log bool) {
	var xys plotter.XYs
	for i, s := range steps {
		y := s.rate()
		if log {
			y = max(y, rateFloor)
		}
		xys = append(xys, plotter.XY{X: s.from.Seconds(), Y: y})
		if i == len(steps)-1 || steps[i+1].from != s.to {
			// The end of the last step, for the line to reach it.
			xys = append(xys, plotter.XY{X: s.to.Seconds(), Y: y})
			p.Add(&plotter.Line{XYs: xys, LineStyle: ls, StepStyle: plotter.PostStep, FillColor: fill})
			xys = nil
		}
	}
}

// bands shades every other span in grey, and the one in which the
// registry is down (down, an index into spans) in amber, with a line at
// each boundary.
type bands struct {
	spans []span
	down  int
}

func (b *bands) Plot(c draw.Canvas, p *plot.Plot) {
	x, _ := p.Transforms(&c)
	edge := draw.LineStyle{Color: color.Gray{Y: 0xbb}, Width: vg.Points(0.6)}
	for i, sp := range b.spans {
		x0, x1 := max(x(sp.from.Seconds()), c.Min.X), min(x(sp.to.Seconds()), c.Max.X)
		var fill color.Color
		switch {
		case i == b.down:
			fill = downShade
		case i%2 == 1:
			fill = shade
		}
		if fill != nil && x1 > x0 {
			c.FillPolygon(fill, []vg.Point{{X: x0, Y: c.Min.Y}, {X: x1, Y: c.Min.Y}, {X: x1, Y: c.Max.Y}, {X: x0, Y: c.Max.Y}})
		}
		if i > 0 {
			c.StrokeLine2(edge, x0, c.Min.Y, x0, c.Max.Y)
		}
	}
}
