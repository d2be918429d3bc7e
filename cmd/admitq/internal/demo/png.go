package demo

import (
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"strings"
	"unicode"
)

// WritePNG writes the chart as a PNG image. Text uses a small built-in
// bitmap font, in lower case; the SVG is the better-looking of the two.
func (c Chart) WritePNG(w io.Writer) error {
	cv := &rasterCanvas{img: image.NewRGBA(image.Rect(0, 0, int(chartW), int(chartH)))}
	c.draw(cv)
	return png.Encode(w, cv.img)
}

type rasterCanvas struct{ img *image.RGBA }

func (r *rasterCanvas) rect(x, y, w, h float64, fill color.RGBA) {
	for py := int(y); py < int(y+h); py++ {
		for px := int(x); px < int(x+w); px++ {
			r.img.SetRGBA(px, py, fill)
		}
	}
}

func (r *rasterCanvas) polyline(xs, ys []float64, c color.RGBA, width float64, dash []float64) {
	dist := 0.0 // along the whole line, for the dash pattern
	period := 0.0
	for _, d := range dash {
		period += d
	}
	on := func() bool {
		if period == 0 {
			return true
		}
		p := math.Mod(dist, period)
		for i, d := range dash {
			if p < d {
				return i%2 == 0
			}
			p -= d
		}
		return true
	}
	for i := 1; i < len(xs); i++ {
		dx, dy := xs[i]-xs[i-1], ys[i]-ys[i-1]
		length := math.Hypot(dx, dy)
		steps := max(int(length*2), 1)
		for s := 0; s <= steps; s++ {
			t := float64(s) / float64(steps)
			if on() {
				r.dot(xs[i-1]+dx*t, ys[i-1]+dy*t, width, c)
			}
			if s < steps {
				dist += length / float64(steps)
			}
		}
	}
}

// dot paints a filled disc of diameter width centred on (x, y).
func (r *rasterCanvas) dot(x, y, width float64, c color.RGBA) {
	rad := max(width/2, 0.5)
	for py := int(math.Floor(y - rad)); py <= int(math.Ceil(y+rad)); py++ {
		for px := int(math.Floor(x - rad)); px <= int(math.Ceil(x+rad)); px++ {
			if math.Hypot(float64(px)+0.5-x, float64(py)+0.5-y) <= rad+0.25 {
				r.img.SetRGBA(px, py, c)
			}
		}
	}
}

func (r *rasterCanvas) text(x, y float64, s string, c color.RGBA, size float64, a anchor, vertical bool) {
	scale := 2
	if size < 10 {
		scale = 1
	}
	adv := (glyphW + 1) * scale
	width := len([]rune(s))*adv - scale
	off := 0
	switch a {
	case anchorMiddle:
		off = -width / 2
	case anchorEnd:
		off = -width
	}
	// y is the baseline, as in SVG; glyphs sit on it.
	for i, ch := range strings.ToLower(s) {
		_ = i
		g := glyph(ch)
		for gy := range glyphH {
			for gx := range glyphW {
				if g[gy][gx] != '#' {
					continue
				}
				for sy := range scale {
					for sx := range scale {
						u := off + gx*scale + sx // along the text
						v := (gy-glyphH)*scale + sy
						if vertical {
							r.img.SetRGBA(int(x)+v+glyphH*scale/2, int(y)-u, c)
						} else {
							r.img.SetRGBA(int(x)+u, int(y)+v, c)
						}
					}
				}
			}
		}
		off += adv
	}
}

const glyphW, glyphH = 5, 7

func glyph(ch rune) [glyphH]string {
	rows, ok := font[ch]
	if !ok {
		if unicode.IsSpace(ch) {
			rows = font[' ']
		} else {
			rows = font['?']
		}
	}
	var g [glyphH]string
	copy(g[:], strings.Split(rows, "|"))
	return g
}

// font is a 5×7 bitmap font: digits, lower-case letters and the
// punctuation the chart uses.
var font = map[rune]string{
	' ': ".....|.....|.....|.....|.....|.....|.....",
	'0': ".###.|#...#|#..##|#.#.#|##..#|#...#|.###.",
	'1': "..#..|.##..|..#..|..#..|..#..|..#..|.###.",
	'2': ".###.|#...#|....#|...#.|..#..|.#...|#####",
	'3': "#####|...#.|..#..|...#.|....#|#...#|.###.",
	'4': "...#.|..##.|.#.#.|#..#.|#####|...#.|...#.",
	'5': "#####|#....|####.|....#|....#|#...#|.###.",
	'6': "..##.|.#...|#....|####.|#...#|#...#|.###.",
	'7': "#####|....#|...#.|..#..|.#...|.#...|.#...",
	'8': ".###.|#...#|#...#|.###.|#...#|#...#|.###.",
	'9': ".###.|#...#|#...#|.####|....#|...#.|.##..",
	'a': ".....|.....|.###.|....#|.####|#...#|.####",
	'b': "#....|#....|#.##.|##..#|#...#|#...#|####.",
	'c': ".....|.....|.###.|#....|#....|#...#|.###.",
	'd': "....#|....#|.##.#|#..##|#...#|#...#|.####",
	'e': ".....|.....|.###.|#...#|#####|#....|.###.",
	'f': "..##.|.#..#|.#...|###..|.#...|.#...|.#...",
	'g': ".....|.####|#...#|#...#|.####|....#|.###.",
	'h': "#....|#....|#.##.|##..#|#...#|#...#|#...#",
	'i': "..#..|.....|.##..|..#..|..#..|..#..|.###.",
	'j': "...#.|.....|..##.|...#.|...#.|#..#.|.##..",
	'k': "#....|#....|#..#.|#.#..|##...|#.#..|#..#.",
	'l': ".##..|..#..|..#..|..#..|..#..|..#..|.###.",
	'm': ".....|.....|##.#.|#.#.#|#.#.#|#...#|#...#",
	'n': ".....|.....|#.##.|##..#|#...#|#...#|#...#",
	'o': ".....|.....|.###.|#...#|#...#|#...#|.###.",
	'p': ".....|.....|####.|#...#|#...#|####.|#....",
	'q': ".....|.....|.####|#...#|#...#|.####|....#",
	'r': ".....|.....|#.##.|##..#|#....|#....|#....",
	's': ".....|.....|.###.|#....|.###.|....#|####.",
	't': ".#...|.#...|###..|.#...|.#...|.#..#|..##.",
	'u': ".....|.....|#...#|#...#|#...#|#..##|.##.#",
	'v': ".....|.....|#...#|#...#|#...#|.#.#.|..#..",
	'w': ".....|.....|#...#|#...#|#.#.#|#.#.#|.#.#.",
	'x': ".....|.....|#...#|.#.#.|..#..|.#.#.|#...#",
	'y': ".....|.....|#...#|#...#|.####|....#|.###.",
	'z': ".....|.....|#####|...#.|..#..|.#...|#####",
	'.': ".....|.....|.....|.....|.....|.##..|.##..",
	',': ".....|.....|.....|.....|.##..|..#..|.#...",
	':': ".....|.##..|.##..|.....|.##..|.##..|.....",
	'/': ".....|....#|...#.|..#..|.#...|#....|.....",
	'-': ".....|.....|.....|#####|.....|.....|.....",
	'_': ".....|.....|.....|.....|.....|.....|#####",
	'(': "...#.|..#..|.#...|.#...|.#...|..#..|...#.",
	')': ".#...|..#..|...#.|...#.|...#.|..#..|.#...",
	'=': ".....|.....|#####|.....|#####|.....|.....",
	'+': ".....|..#..|..#..|#####|..#..|..#..|.....",
	'%': "##...|##..#|...#.|..#..|.#...|#..##|...##",
	'×': ".....|#...#|.#.#.|..#..|.#.#.|#...#|.....",
	'?': ".###.|#...#|....#|...#.|..#..|.....|..#..",
}
