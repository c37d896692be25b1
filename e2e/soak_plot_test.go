package e2e

import (
	"fmt"
	"image/color"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// plot draws the mode's timeline: one row per task with its applies
// (coloured by the member that ran them; a cross where one was
// interrupted) and, in spread mode, a thin line below in the colour of its
// owner; one row per member with the faults it suffered (coloured by
// kind); a row for Consul's restarts and, in leader mode, one for the
// leader.
func (m *soakMode) plot(path string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("ctsync soak, %s mode, seed %d", m.mode, m.seed)
	p.X.Label.Text = "seconds since the chaos started"
	p.Legend.Top = true
	p.Legend.Left = false
	x := func(at time.Time) float64 { return at.Sub(m.start).Seconds() }
	palette := []color.Color{
		color.RGBA{R: 31, G: 119, B: 180, A: 255},
		color.RGBA{R: 255, G: 127, B: 14, A: 255},
		color.RGBA{R: 44, G: 160, B: 44, A: 255},
	}
	member := map[string]int{}
	for i, in := range m.c.insts {
		member[in.id] = i
	}
	tasks := m.taskNames()
	row := map[string]float64{}
	var ticks []plot.Tick
	for i, name := range tasks {
		row[name] = float64(i)
		ticks = append(ticks, plot.Tick{Value: float64(i), Label: name})
	}
	base := float64(len(tasks)) + 1
	for i, in := range m.c.insts {
		ticks = append(ticks, plot.Tick{Value: base + float64(i), Label: "faults " + in.id})
	}
	consulRow, leaderRow := base+float64(len(m.c.insts)), base+float64(len(m.c.insts))+1
	ticks = append(ticks, plot.Tick{Value: consulRow, Label: "consul"})
	if m.mode == "leader" {
		ticks = append(ticks, plot.Tick{Value: leaderRow, Label: "leader"})
	}
	p.Y.Tick.Marker = plot.ConstantTicks(ticks)

	segment := func(x0, x1, y float64, c color.Color, w vg.Length) error {
		l, err := plotter.NewLine(plotter.XYs{{X: x0, Y: y}, {X: max(x1, x0+0.2), Y: y}})
		if err != nil {
			return err
		}
		l.Color, l.Width = c, w
		p.Add(l)
		return nil
	}
	// Ownership (spread) or leadership (leader), from the polls.
	m.mu.Lock()
	owners := slices.Clone(m.owners)
	faults := slices.Clone(m.faults)
	m.mu.Unlock()
	for i := 1; i < len(owners); i++ {
		a, b := owners[i-1], owners[i]
		if m.mode == "leader" {
			if j, ok := member[a.leader]; ok {
				if err := segment(x(a.at), x(b.at), leaderRow, palette[j], vg.Points(6)); err != nil {
					return err
				}
			}
			continue
		}
		for task, id := range a.owners {
			if j, ok := member[id]; ok {
				if err := segment(x(a.at), x(b.at), row[task]-0.3, palette[j], vg.Points(1.5)); err != nil {
					return err
				}
			}
		}
	}
	// Applies.
	var cuts plotter.XYs
	for _, r := range m.runs {
		j, ok := member[r.inst]
		y, known := row[r.task]
		if !ok || !known || r.end.Before(m.start) {
			continue
		}
		if err := segment(x(r.start), x(r.end), y, palette[j], vg.Points(5)); err != nil {
			return err
		}
		if !r.done {
			cuts = append(cuts, plotter.XY{X: x(r.end), Y: y})
		}
	}
	if len(cuts) > 0 {
		s, err := plotter.NewScatter(cuts)
		if err != nil {
			return err
		}
		s.Shape, s.Color = draw.CrossGlyph{}, color.Black
		p.Add(s)
		p.Legend.Add("apply interrupted", s)
	}
	// Faults.
	kinds := []string{fKill, fStop, fCut, fSlow, fDisk, fAPI, fConsul}
	kindColor := map[string]color.Color{
		fKill: color.RGBA{R: 214, G: 39, B: 40, A: 255}, fStop: color.RGBA{R: 148, G: 103, B: 189, A: 255},
		fCut: color.RGBA{A: 255}, fSlow: color.RGBA{R: 188, G: 189, B: 34, A: 255},
		fDisk: color.RGBA{R: 140, G: 86, B: 75, A: 255}, fAPI: color.RGBA{R: 23, G: 190, B: 207, A: 255},
		fConsul: color.RGBA{R: 227, G: 119, B: 194, A: 255},
	}
	end := time.Now()
	for _, f := range faults {
		y := consulRow
		if j, ok := member[f.target]; ok {
			y = base + float64(j)
		}
		to := f.to
		if to.IsZero() {
			to = end
		}
		if err := segment(x(f.from), x(to), y, kindColor[f.kind], vg.Points(7)); err != nil {
			return err
		}
	}
	for _, k := range kinds {
		l, err := plotter.NewLine(plotter.XYs{{}, {}})
		if err != nil {
			return err
		}
		l.Color, l.Width = kindColor[k], vg.Points(5)
		p.Legend.Add(k, l)
	}
	for i, in := range m.c.insts {
		l, err := plotter.NewLine(plotter.XYs{{}, {}})
		if err != nil {
			return err
		}
		l.Color, l.Width = palette[i], vg.Points(5)
		p.Legend.Add("run by "+in.id, l)
	}
	p.X.Min = min(p.X.Min, 0)
	p.Y.Min, p.Y.Max = -1, leaderRow+6 // room for the legend above the rows
	p.Legend.XOffs = vg.Points(0)
	return p.Save(14*vg.Inch, 7*vg.Inch, path)
}
