// Package promtext reads a scrape of /metrics in the Prometheus text format
// and sums the series picked by name and label fragments, for the
// integration tests and hack/bench. Parsing, and the flattening of
// histograms and summaries into the series the text shows, are expfmt's
// (TextParser, ExtractSamples); only the picking is here.
//
// Series are named and labelled as the text exposes them: histogram x is
// read through x_bucket (with its le label), x_count and x_sum, a summary
// through x (with quantile), x_count and x_sum. A fragment is matched
// against each label pair as the text writes it (`name="value"`, the value
// escaped), because callers ask for prefixes (`code="5` is every 5xx) as
// well as whole pairs (`le="5"`).
package promtext

import (
	"io"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families is one parsed scrape, by metric family name.
type Families map[string]*dto.MetricFamily

// Parse reads r in the Prometheus text format.
func Parse(r io.Reader) (Families, error) {
	// The zero TextParser is invalid: it needs a name validation scheme.
	// UTF-8 accepts every name the legacy scheme does.
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(r)
}

// Sum adds the series named name whose label pairs contain every fragment,
// each within one pair. found says whether any series matched.
func (f Families) Sum(name string, fragments ...string) (total float64, found bool) {
	for _, s := range f.series(name) {
		if matches(s.Metric, fragments) {
			total, found = total+float64(s.Value), true
		}
	}
	return total, found
}

// SumBy adds the series named name per value of label; series without the
// label are left out.
func (f Families) SumBy(name, label string) map[string]float64 {
	out := map[string]float64{}
	for _, s := range f.series(name) {
		if v, ok := s.Metric[model.LabelName(label)]; ok {
			out[string(v)] += float64(s.Value)
		}
	}
	return out
}

// series are the samples the text shows under name: those of the family
// of that name, else of the histogram or summary it is a suffixed series
// of, as the parser resolves it.
func (f Families) series(name string) model.Vector {
	mf := f[name]
	if mf == nil {
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && f[base] != nil {
				mf = f[base]
				break
			}
		}
	}
	if mf == nil {
		return nil
	}
	all, _ := expfmt.ExtractSamples(&expfmt.DecodeOptions{}, mf)
	var out model.Vector
	for _, s := range all {
		if string(s.Metric[model.MetricNameLabel]) == name {
			out = append(out, s)
		}
	}
	return out
}

var escape = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)

// matches reports whether every fragment is within one of m's label pairs,
// written as the text format writes them.
func matches(m model.Metric, fragments []string) bool {
	for _, frag := range fragments {
		in := false
		for k, v := range m {
			if k != model.MetricNameLabel && strings.Contains(string(k)+`="`+escape.Replace(string(v))+`"`, frag) {
				in = true
				break
			}
		}
		if !in {
			return false
		}
	}
	return true
}
