package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"gonum.org/v1/plot/plotter"
)

func TestCumulative(t *testing.T) {
	got := cumulative([]float64{0.5, 1, 1})
	want := plotter.XYs{{X: 0, Y: 0}, {X: 0.5, Y: 0}, {X: 0.5, Y: 1}, {X: 1, Y: 1}, {X: 1, Y: 2}, {X: 1, Y: 2}, {X: 1, Y: 3}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	// Many events: few points, still from 0 to the last time and count.
	ts := make([]float64, 100000)
	for i := range ts {
		ts[i] = float64(i) / 1000
	}
	got = cumulative(ts)
	if len(got) > 2*maxSteps+5 {
		t.Errorf("%d points for %d events", len(got), len(ts))
	}
	if last := got[len(got)-1]; last.X != ts[len(ts)-1] || last.Y != float64(len(ts)) {
		t.Errorf("ends at %v, want (%v, %d)", last, ts[len(ts)-1], len(ts))
	}
	for i := 1; i < len(got); i++ {
		if got[i].X < got[i-1].X || got[i].Y < got[i-1].Y {
			t.Fatalf("not a rising step curve at %d: %v then %v", i, got[i-1], got[i])
		}
	}
}

// TestRunDrawsEachReportAndMemory: a convergence plot per N with series,
// and memory against N once there are two N.
func TestRunDrawsEachReportAndMemory(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "bench.json")
	err := os.WriteFile(in, []byte(`{"reports":[
		{"n":100,"replicas":0,"median":{"steady_rss_mb":30,"steady_heap_inuse_mb":5,"peak_rss_mb":35},
		 "series":{"foos_created":[0.1,0.2],"deployments_exist":[0.2,0.3],"foos_ready":[0.3,0.6],"floor_deployments_created":[0.05,0.1]}},
		{"n":1000,"replicas":0,"median":{"steady_rss_mb":40,"steady_heap_inuse_mb":12,"peak_rss_mb":50}}]}`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := run(in, dir); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"bench-convergence-100.svg": "Foos Ready",
		"bench-memory.svg":          "steady RSS",
	} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "<svg") || !strings.Contains(string(b), want) {
			t.Errorf("%s: no SVG with %q", name, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "bench-convergence-1000.svg")); err == nil {
		t.Error("a convergence plot for a report without series")
	}
}
