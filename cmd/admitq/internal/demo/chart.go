package demo

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// Chart is a line plot of tasks started per second, per tenant, with each
// tenant's quota as a dashed line. Tenants that sent more than their quota
// also get a dotted line of what they sent, so the flattening shows.
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

var (
	ink   = color.RGBA{0x22, 0x22, 0x22, 0xff}
	faint = color.RGBA{0x88, 0x88, 0x88, 0xff}
	grid  = color.RGBA{0xe4, 0xe4, 0xe4, 0xff}
	paper = color.RGBA{0xff, 0xff, 0xff, 0xff}
)

// canvas is what the layout draws on: SVG or a raster image. Coordinates
// are in the layout's units, y downwards.
type canvas interface {
	rect(x, y, w, h float64, fill color.RGBA)
	polyline(xs, ys []float64, c color.RGBA, width float64, dash []float64)
	text(x, y float64, s string, c color.RGBA, size float64, anchor anchor, vertical bool)
}

type anchor int

const (
	anchorStart anchor = iota
	anchorMiddle
	anchorEnd
)

const (
	chartW, chartH = 900.0, 460.0
	marginL        = 70.0
	marginR        = 190.0
	marginT        = 56.0
	marginB        = 56.0
)

// draw lays the chart out on cv.
func (c Chart) draw(cv canvas) {
	n := 1
	top := 1.0
	for _, s := range c.Series {
		n = max(n, len(s.Started), len(s.Sent))
		top = max(top, s.Quota, float64(maxInt(s.Started)), float64(maxInt(s.Sent)))
	}
	step := niceStep(top*1.1, 6)
	ymax := math.Ceil(top*1.1/step) * step
	pw, ph := chartW-marginL-marginR, chartH-marginT-marginB
	px := func(sec float64) float64 { return marginL + pw*sec/float64(n) }
	py := func(v float64) float64 { return marginT + ph*(1-v/ymax) }

	cv.rect(0, 0, chartW, chartH, paper)
	cv.text(marginL, 30, c.Title, ink, 16, anchorStart, false)

	for v := 0.0; v <= ymax+step/2; v += step {
		cv.polyline([]float64{px(0), px(float64(n))}, []float64{py(v), py(v)}, grid, 1, nil)
		cv.text(marginL-8, py(v)+4, fmtNum(v), faint, 12, anchorEnd, false)
	}
	xstep := int(niceStep(float64(n), 10))
	for s := 0; s <= n; s += max(xstep, 1) {
		cv.polyline([]float64{px(float64(s)), px(float64(s))}, []float64{py(0), py(0) + 5}, faint, 1, nil)
		cv.text(px(float64(s)), py(0)+20, strconv.Itoa(s), faint, 12, anchorMiddle, false)
	}
	cv.polyline([]float64{px(0), px(0), px(float64(n))}, []float64{py(ymax), py(0), py(0)}, ink, 1, nil)
	cv.text(marginL+pw/2, chartH-12, "seconds since start", ink, 13, anchorMiddle, false)
	cv.text(20, marginT+ph/2, "tasks started per second", ink, 13, anchorMiddle, true)

	ly := marginT + 8
	for i, s := range c.Series {
		col := palette[i%len(palette)]
		light := mix(col, paper, 0.45)
		cv.polyline([]float64{px(0), px(float64(n))}, []float64{py(s.Quota), py(s.Quota)}, col, 1.5, []float64{8, 5})
		if s.Sent != nil {
			xs, ys := points(s.Sent, px, py)
			cv.polyline(xs, ys, light, 1.5, []float64{2, 4})
		}
		xs, ys := points(s.Started, px, py)
		cv.polyline(xs, ys, col, 2.5, nil)

		lx := chartW - marginR + 18
		cv.polyline([]float64{lx, lx + 24}, []float64{ly, ly}, col, 2.5, nil)
		cv.text(lx+32, ly+5, s.Name, ink, 13, anchorStart, false)
		cv.text(lx+32, ly+23, "quota "+fmtNum(s.Quota)+"/s", faint, 11, anchorStart, false)
		ly += 18
		if s.Sent != nil {
			ly += 18
			cv.polyline([]float64{lx, lx + 24}, []float64{ly, ly}, light, 1.5, []float64{2, 4})
			cv.text(lx+32, ly+5, "sent "+fmtNum(mean(s.Sent))+"/s", faint, 11, anchorStart, false)
		}
		ly += 30
	}
	ly += 6
	lx := chartW - marginR + 18
	cv.polyline([]float64{lx, lx + 24}, []float64{ly, ly}, faint, 1.5, []float64{8, 5})
	cv.text(lx+32, ly+5, "quota", faint, 11, anchorStart, false)
	cv.polyline([]float64{lx, lx + 24}, []float64{ly + 18, ly + 18}, faint, 1.5, []float64{2, 4})
	cv.text(lx+32, ly+23, "sent", faint, 11, anchorStart, false)
}

// points places value k in the middle of second k.
func points(vs []int, px, py func(float64) float64) (xs, ys []float64) {
	for k, v := range vs {
		xs = append(xs, px(float64(k)+0.5))
		ys = append(ys, py(float64(v)))
	}
	return xs, ys
}

func maxInt(vs []int) int {
	m := 0
	for _, v := range vs {
		m = max(m, v)
	}
	return m
}

func mean(vs []int) float64 {
	sum := 0
	for _, v := range vs {
		sum += v
	}
	return math.Round(float64(sum)/float64(max(len(vs), 1))*10) / 10
}

// niceStep returns a step of 1, 2 or 5 times a power of ten that cuts span
// into at most about n pieces.
func niceStep(span float64, n int) float64 {
	raw := span / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

func fmtNum(v float64) string {
	return strconv.FormatFloat(v, 'f', -1, 64)
}

func mix(a, b color.RGBA, t float64) color.RGBA {
	f := func(x, y uint8) uint8 { return uint8(float64(x)*(1-t) + float64(y)*t) }
	return color.RGBA{f(a.R, b.R), f(a.G, b.G), f(a.B, b.B), 0xff}
}

// WriteSVG writes the chart as a standalone SVG document.
func (c Chart) WriteSVG(w io.Writer) error {
	s := &svgCanvas{}
	c.draw(s)
	_, err := fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="Helvetica, Arial, sans-serif">
%s</svg>
`, chartW, chartH, chartW, chartH, s.b.String())
	return err
}

type svgCanvas struct{ b strings.Builder }

func hex(c color.RGBA) string { return fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B) }

func (s *svgCanvas) rect(x, y, w, h float64, fill color.RGBA) {
	fmt.Fprintf(&s.b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n", x, y, w, h, hex(fill))
}

func (s *svgCanvas) polyline(xs, ys []float64, c color.RGBA, width float64, dash []float64) {
	if len(xs) == 0 {
		return
	}
	var pts []string
	for i := range xs {
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", xs[i], ys[i]))
	}
	extra := ""
	if dash != nil {
		var ds []string
		for _, d := range dash {
			ds = append(ds, fmtNum(d))
		}
		extra = fmt.Sprintf(` stroke-dasharray="%s"`, strings.Join(ds, " "))
	}
	fmt.Fprintf(&s.b, "<polyline points=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"%g\" stroke-linejoin=\"round\"%s/>\n",
		strings.Join(pts, " "), hex(c), width, extra)
}

func (s *svgCanvas) text(x, y float64, str string, c color.RGBA, size float64, a anchor, vertical bool) {
	anchors := [...]string{"start", "middle", "end"}
	rot := ""
	if vertical {
		rot = fmt.Sprintf(` transform="rotate(-90 %.1f %.1f)"`, x, y)
	}
	fmt.Fprintf(&s.b, "<text x=\"%.1f\" y=\"%.1f\" fill=\"%s\" font-size=\"%g\" text-anchor=\"%s\"%s>%s</text>\n",
		x, y, hex(c), size, anchors[a], rot, escapeXML(str))
}

func escapeXML(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
