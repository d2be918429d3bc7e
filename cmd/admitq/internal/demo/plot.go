package demo

import (
	"fmt"
	"image/color"
	"io"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Chart is a line plot of tasks started per second, per tenant, with each
// tenant's quota as a dashed line. Tenants that sent more than their quota
// also get a dotted line of what they sent, so the flattening shows. It is
// drawn with gonum.org/v1/plot.
type Chart struct {
	Title  string
	Series []Series
}

// Series is one tenant's line.
type Series struct {
	Name    string
	Quota   float64 // tasks per second the quota allows: Limit / Window
	Started []int   // tasks started in each second
	Sent    []int   // tasks sent in each second; nil draws no sent line
}

// ChartOf turns a Result into a Chart.
func ChartOf(res Result) Chart {
	c := Chart{Title: "tasks started per second, by tenant"}
	for _, t := range res.Tenants {
		s := Series{Name: t.Name, Quota: float64(t.Quota.Limit) / t.Quota.Window.Seconds(), Started: t.Started}
		if t.Rate > s.Quota {
			// Only whole seconds of sending: the last one is cut short.
			s.Sent = t.SentPerSecond[:min(len(t.SentPerSecond), int(res.Sending/time.Second))]
		}
		c.Series = append(c.Series, s)
	}
	return c
}

var palette = []color.RGBA{
	{0xd6, 0x27, 0x28, 0xff}, // red: the first tenant is the noisy one in the demo
	{0x1f, 0x77, 0xb4, 0xff},
	{0x2c, 0xa0, 0x2c, 0xff},
	{0x94, 0x67, 0xbd, 0xff},
	{0xff, 0x7f, 0x0e, 0xff},
	{0x8c, 0x56, 0x4b, 0xff},
}

const chartW, chartH = 9 * vg.Inch, 4.6 * vg.Inch

// plot lays the chart out.
func (c Chart) plot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = c.Title
	p.X.Label.Text = "seconds since start"
	p.Y.Label.Text = "tasks started per second"
	p.Y.Min = 0
	p.Legend.Top = true
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	n := 1
	for _, s := range c.Series {
		n = max(n, len(s.Started), len(s.Sent))
	}
	for i, s := range c.Series {
		col := palette[i%len(palette)]
		quota, err := plotter.NewLine(plotter.XYs{{X: 0, Y: s.Quota}, {X: float64(n), Y: s.Quota}})
		if err != nil {
			return nil, err
		}
		quota.Color, quota.Width, quota.Dashes = col, vg.Points(1), []vg.Length{vg.Points(6), vg.Points(4)}
		p.Add(quota)
		if s.Sent != nil {
			sent, err := plotter.NewLine(points(s.Sent))
			if err != nil {
				return nil, err
			}
			sent.Color, sent.Width, sent.Dashes = lighter(col), vg.Points(1.2), []vg.Length{vg.Points(1.5), vg.Points(3)}
			p.Add(sent)
			p.Legend.Add(fmt.Sprintf("%s sent", s.Name), sent)
		}
		started, err := plotter.NewLine(points(s.Started))
		if err != nil {
			return nil, err
		}
		started.Color, started.Width = col, vg.Points(2)
		p.Add(started)
		p.Legend.Add(fmt.Sprintf("%s started (quota %g/s, dashed)", s.Name, s.Quota), started)
	}
	p.X.Min, p.X.Max = 0, float64(n)
	// Headroom above the highest line, for the legend.
	p.Y.Max *= 1.4
	p.Title.Padding = vg.Points(8)
	return p, nil
}

// points places value k in the middle of second k.
func points(vs []int) plotter.XYs {
	xy := make(plotter.XYs, len(vs))
	for i, v := range vs {
		xy[i] = plotter.XY{X: float64(i) + 0.5, Y: float64(v)}
	}
	return xy
}

func lighter(c color.RGBA) color.RGBA {
	mix := func(a uint8) uint8 { return uint8((int(a)*55 + 255*45) / 100) }
	return color.RGBA{mix(c.R), mix(c.G), mix(c.B), 0xff}
}

// WriteSVG writes the chart as SVG.
func (c Chart) WriteSVG(w io.Writer) error { return c.write(w, "svg") }

// WritePNG writes the chart as PNG.
func (c Chart) WritePNG(w io.Writer) error { return c.write(w, "png") }

func (c Chart) write(w io.Writer, format string) error {
	p, err := c.plot()
	if err != nil {
		return err
	}
	wt, err := p.WriterTo(chartW, chartH, format)
	if err != nil {
		return err
	}
	_, err = wt.WriteTo(w)
	return err
}
