package plot

import (
	"bytes"
	"image/color"
	"image/png"
	"testing"
	"time"
)

func TestChart(t *testing.T) {
	blue := color.RGBA{31, 119, 180, 255}
	c := Chart{XLabel: "N", YLabel: "seconds", X: []int{10, 100}, Series: []Series{
		{Label: "a", Color: blue, Y: []time.Duration{time.Second, 4 * time.Second}},
	}}
	data, err := c.PNG()
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 900 || b.Dy() != 520 {
		t.Fatalf("size %v, want 900×520", b)
	}
	// The last point (100, 4 s) is the top right corner of the plot area
	// (the y axis rounds 4 s up to 5 s).
	x, y := 80+560, 40+420-int(4.0/5*420)
	if got := color.RGBAModel.Convert(img.At(x, y)); got != blue {
		t.Errorf("pixel at the last point is %v, want the series' %v", got, blue)
	}
	if got := color.RGBAModel.Convert(img.At(5, 515)); got != (color.RGBA{255, 255, 255, 255}) {
		t.Errorf("background is %v, want white", got)
	}
}
