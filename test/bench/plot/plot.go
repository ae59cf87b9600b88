// Package plot draws the line chart of `make bench` (docs/convergence.png):
// durations against a count, one coloured line per series, a legend on the
// right. It needs nothing but the standard library and x/image's basic font.
package plot

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"time"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Chart is durations (Series, in seconds on the y axis) against counts (X).
type Chart struct {
	// XLabel and YLabel name the axes.
	XLabel, YLabel string
	// X are the counts, in increasing order; each line starts at 0.
	X []int
	// Series are the lines, each with one value per X.
	Series []Series
}

// Series is one line of the chart.
type Series struct {
	Label string
	Color color.RGBA
	Y     []time.Duration
}

// PNG is the chart encoded as a PNG image.
func (c Chart) PNG() ([]byte, error) {
	var buf bytes.Buffer
	if err := png.Encode(&buf, c.Image()); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Image draws the chart, 900×520 pixels.
func (c Chart) Image() image.Image {
	const width, height, left, right, top, bottom = 900, 520, 80, 260, 40, 60
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	fill(img, img.Bounds(), color.RGBA{255, 255, 255, 255})
	maxN, maxY := 0.0, 0.0
	for i, n := range c.X {
		maxN = math.Max(maxN, float64(n))
		for _, s := range c.Series {
			maxY = math.Max(maxY, s.Y[i].Seconds())
		}
	}
	maxY = niceCeil(maxY)
	if maxN == 0 || maxY == 0 {
		return img
	}
	plotW, plotH := width-left-right, height-top-bottom
	x := func(n float64) int { return left + int(n/maxN*float64(plotW)) }
	y := func(s float64) int { return top + plotH - int(s/maxY*float64(plotH)) }
	black, grid := color.RGBA{0, 0, 0, 255}, color.RGBA{225, 225, 225, 255}
	for i := 0; i <= 5; i++ {
		v := maxY * float64(i) / 5
		line(img, left, y(v), left+plotW, y(v), grid, 1)
		text(img, left-8-7*len(label(v)), y(v)+4, label(v), black)
	}
	line(img, left, top, left, top+plotH, black, 1)
	line(img, left, top+plotH, left+plotW, top+plotH, black, 1)
	for _, n := range c.X {
		line(img, x(float64(n)), top+plotH, x(float64(n)), top+plotH+5, black, 1)
		s := fmt.Sprint(n)
		text(img, x(float64(n))-7*len(s)/2, top+plotH+20, s, black)
	}
	text(img, left+plotW/2-80, height-15, c.XLabel, black)
	text(img, 10, 20, c.YLabel, black)
	for i, s := range c.Series {
		px, py := x(0), y(0)
		for j, n := range c.X {
			nx, ny := x(float64(n)), y(s.Y[j].Seconds())
			line(img, px, py, nx, ny, s.Color, 3)
			fill(img, image.Rect(nx-4, ny-4, nx+5, ny+5), s.Color)
			px, py = nx, ny
		}
		ly := top + 20 + 22*i
		line(img, width-right+15, ly-4, width-right+40, ly-4, s.Color, 3)
		text(img, width-right+48, ly, s.Label, black)
	}
	return img
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 0
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func label(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	for py := r.Min.Y; py < r.Max.Y; py++ {
		for px := r.Min.X; px < r.Max.X; px++ {
			img.SetRGBA(px, py, c)
		}
	}
}

// line draws from (x0, y0) to (x1, y1), thick pixels wide.
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA, thick int) {
	steps := max(abs(x1-x0), abs(y1-y0), 1)
	for i := 0; i <= steps; i++ {
		px := x0 + (x1-x0)*i/steps
		py := y0 + (y1-y0)*i/steps
		fill(img, image.Rect(px-thick/2, py-thick/2, px-thick/2+thick, py-thick/2+thick), c)
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func text(img *image.RGBA, x, y int, s string, c color.RGBA) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}
