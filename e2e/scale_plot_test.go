package e2e

import (
	"fmt"
	"image/color"
	"os/exec"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// plotReaction draws reaction p50 and p99 against watched instances, one
// line pair per task count, on log-log axes.
func plotReaction(path string, curves []reactionCurve) error {
	p := plot.New()
	p.Title.Text = "ctsync: catalog change → all affected applies started"
	p.X.Label.Text = "instances in the catalog (services × 100 instances; 10 = 1 × 10)"
	p.Y.Label.Text = "latency (ms)"
	p.X.Scale = plot.LogScale{}
	p.Y.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	var ticks []plot.Tick
	for _, v := range []float64{0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000} {
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
	}
	p.Y.Tick.Marker = plot.ConstantTicks(ticks)
	p.Legend.Top = true
	p.Legend.Left = true

	var taskCounts []int
	for _, c := range curves {
		if !slices.Contains(taskCounts, c.tasks) {
			taskCounts = append(taskCounts, c.tasks)
		}
	}
	slices.Sort(taskCounts)
	palette := []color.Color{
		color.RGBA{R: 31, G: 119, B: 180, A: 255},
		color.RGBA{R: 255, G: 127, B: 14, A: 255},
		color.RGBA{R: 44, G: 160, B: 44, A: 255},
		color.RGBA{R: 214, G: 39, B: 40, A: 255},
	}
	for i, tc := range taskCounts {
		var p50, p99 plotter.XYs
		for _, c := range curves {
			if c.tasks == tc {
				p50 = append(p50, plotter.XY{X: float64(c.instances), Y: max(c.p50, 0.01)})
				p99 = append(p99, plotter.XY{X: float64(c.instances), Y: max(c.p99, 0.01)})
			}
		}
		col := palette[i%len(palette)]
		for _, s := range []struct {
			name string
			xys  plotter.XYs
			dash []vg.Length
		}{{"p50", p50, nil}, {"p99", p99, []vg.Length{vg.Points(4), vg.Points(3)}}} {
			l, pts, err := plotter.NewLinePoints(s.xys)
			if err != nil {
				return err
			}
			l.Color, l.Dashes = col, s.dash
			pts.Color, pts.Shape = col, draw.CircleGlyph{}
			p.Add(l, pts)
			p.Legend.Add(fmt.Sprintf("%d tasks, %s", tc, s.name), l, pts)
		}
	}
	return p.Save(7*vg.Inch, 4.5*vg.Inch, path)
}

func execOutput(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).Output()
	return string(out), err
}
