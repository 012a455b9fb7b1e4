// Command plot draws the figures of hack/bench's JSON (-json) as SVG:
// convergence over time for each N (Foos created, their Deployments as
// declared, Foos Ready, and the floor's Deployments created directly), and
// memory against N when the bench ran for two N or more. It is a module of
// its own so that the plotting library never enters the controller's
// dependencies; `make bench` runs it after the bench.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// results is the part of hack/bench's JSON that is drawn.
type results struct {
	Reports []report `json:"reports"`
}

type report struct {
	N        int                  `json:"n"`
	Replicas int                  `json:"replicas"`
	Median   map[string]float64   `json:"median"`
	Series   map[string][]float64 `json:"series"`
}

func main() {
	in := flag.String("in", "_output/bench.json", "hack/bench's JSON output")
	out := flag.String("out", "_output", "directory for the plots")
	flag.StringVar(&format, "format", "svg", "svg or png")
	flag.Parse()
	if err := run(*in, *out); err != nil {
		fmt.Fprintf(os.Stderr, "plot: %v\n", err)
		os.Exit(1)
	}
}

// format is the plots' file format (and extension).
var format = "svg"

func run(in, out string) error {
	b, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var res results
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, r := range res.Reports {
		if len(r.Series) == 0 {
			continue
		}
		p := plot.New()
		p.Title.Text = fmt.Sprintf("Converging N=%d Foos (%d replica(s) each)", r.N, r.Replicas)
		p.X.Label.Text = "seconds since the first create"
		p.Y.Label.Text = "objects"
		p.Legend.Top, p.Legend.Left = true, true
		curves := []struct{ key, label string }{
			{"foos_created", "Foos created (by the bench)"},
			{"deployments_exist", "their Deployments as declared"},
			{"foos_ready", "Foos Ready"},
			{"foos_reported", "Foos' status written (no Deployment controller)"},
			{"floor_deployments_created", "floor: Deployments created directly"},
		}
		for i, c := range curves {
			ts := r.Series[c.key]
			if len(ts) == 0 {
				continue
			}
			l, err := plotter.NewLine(cumulative(ts))
			if err != nil {
				return err
			}
			l.Color = plotutil.Color(i)
			l.Width = vg.Points(1.5)
			if c.key == "floor_deployments_created" {
				l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			}
			p.Add(l)
			p.Legend.Add(c.label, l)
		}
		p.Add(plotter.NewGrid())
		// Headroom above the curves for the legend.
		p.Y.Min, p.Y.Max = 0, 1.45*float64(r.N)
		path := filepath.Join(out, fmt.Sprintf("bench-convergence-%d.%s", r.N, format))
		if err := p.Save(16*vg.Centimeter, 10*vg.Centimeter, path); err != nil {
			return err
		}
		fmt.Println(path)
	}
	if len(res.Reports) < 2 {
		return nil
	}
	p := plot.New()
	p.Title.Text = "Controller memory against N (Foos, each with its Deployment)"
	p.X.Label.Text = "N"
	p.Y.Label.Text = "MiB"
	p.Legend.Top, p.Legend.Left = true, true
	p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	keys := []struct{ key, label string }{
		{"steady_rss_mb", "steady RSS (converged, idle)"},
		{"steady_heap_inuse_mb", "steady Go heap in use"},
		{"peak_rss_mb", "peak RSS while converging"},
		{"restart_peak_rss_mb", "peak RSS of a restart"},
		{"live_heap_mb", "live Go heap (converged, idle, after a GC)"},
		{"restart_live_heap_mb", "live Go heap (restarted, after a GC)"},
	}
	reps := slices.Clone(res.Reports)
	slices.SortFunc(reps, func(a, b report) int { return a.N - b.N })
	for i, k := range keys {
		pts := make(plotter.XYs, 0, len(reps))
		for _, r := range reps {
			if v, ok := r.Median[k.key]; ok {
				pts = append(pts, plotter.XY{X: float64(r.N), Y: v})
			}
		}
		if len(pts) == 0 {
			continue
		}
		l, s, err := plotter.NewLinePoints(pts)
		if err != nil {
			return err
		}
		l.Color, s.Color = plotutil.Color(i), plotutil.Color(i)
		s.Shape = plotutil.Shape(i)
		p.Add(l, s)
		p.Legend.Add(k.label, l, s)
	}
	p.Add(plotter.NewGrid())
	p.Y.Min, p.Y.Max = 0, 1.5*p.Y.Max
	path := filepath.Join(out, "bench-memory."+format)
	if err := p.Save(16*vg.Centimeter, 10*vg.Centimeter, path); err != nil {
		return err
	}
	fmt.Println(path)
	return nil
}

// cumulative turns sorted event times into a step curve: how many had
// happened by each time. Past maxSteps events it keeps every k-th (and
// the last), so that a plot of 100,000 Foos stays a small file.
func cumulative(ts []float64) plotter.XYs {
	step := max(1, len(ts)/maxSteps)
	pts := make(plotter.XYs, 0, 2*len(ts)/step+3)
	pts = append(pts, plotter.XY{X: 0, Y: 0})
	for i := 0; i < len(ts); i += step {
		if i+step >= len(ts) {
			i = len(ts) - 1
		}
		pts = append(pts, plotter.XY{X: ts[i], Y: pts[len(pts)-1].Y}, plotter.XY{X: ts[i], Y: float64(i + 1)})
	}
	return pts
}

// maxSteps bounds the steps of a curve.
const maxSteps = 400
