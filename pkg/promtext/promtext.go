// Package promtext reads a scrape of /metrics in the Prometheus text format
// and sums the series picked by name and label fragments, for the
// integration tests and hack/bench. Parsing is expfmt's; only the picking is
// here.
//
// Series are named and labelled as the text exposes them, not as the parsed
// model holds them: histogram x is read through x_bucket (with its le label),
// x_count and x_sum, a summary through x (with quantile), x_count and x_sum.
// Labels are matched as text fragments because callers ask for prefixes
// (`code="5` is every 5xx) as well as whole pairs (`le="5"`).
package promtext

import (
	"io"
	"strconv"
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

// Sum adds the series named name whose labels, rendered as exposed
// (`a="x",b="y"`, with le or quantile last), contain every fragment. found
// says whether any series matched.
func (f Families) Sum(name string, fragments ...string) (total float64, found bool) {
	f.each(name, func(labels []*dto.LabelPair, v float64) {
		text := render(labels)
		for _, frag := range fragments {
			if !strings.Contains(text, frag) {
				return
			}
		}
		total, found = total+v, true
	})
	return total, found
}

// SumBy adds the series named name per value of label; series without the
// label are left out.
func (f Families) SumBy(name, label string) map[string]float64 {
	out := map[string]float64{}
	f.each(name, func(labels []*dto.LabelPair, v float64) {
		for _, l := range labels {
			if l.GetName() == label {
				out[l.GetValue()] += v
				return
			}
		}
	})
	return out
}

// part is which text series of a family a name stands for.
type part int

const (
	whole  part = iota // the family's own name
	bucket             // x_bucket of histogram x
	count              // x_count of histogram or summary x
	sum                // x_sum of histogram or summary x
)

// lookup resolves name as the parser does: an exact family first, else the
// histogram or summary it is a suffixed series of.
func (f Families) lookup(name string) (*dto.MetricFamily, part) {
	if mf, ok := f[name]; ok {
		return mf, whole
	}
	for _, s := range []struct {
		suffix string
		part   part
	}{{"_bucket", bucket}, {"_count", count}, {"_sum", sum}} {
		base, ok := strings.CutSuffix(name, s.suffix)
		if !ok {
			continue
		}
		switch f[base].GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			return f[base], s.part
		case dto.MetricType_SUMMARY:
			if s.part != bucket {
				return f[base], s.part
			}
		}
	}
	return nil, whole
}

// each calls fn with the labels and value of every text series named name.
func (f Families) each(name string, fn func(labels []*dto.LabelPair, v float64)) {
	mf, p := f.lookup(name)
	if mf == nil {
		return
	}
	for _, m := range mf.GetMetric() {
		labels, h, s := m.GetLabel(), m.GetHistogram(), m.GetSummary()
		switch p {
		case bucket:
			for _, b := range h.GetBucket() {
				fn(with(labels, model.BucketLabel, b.GetUpperBound()),
					either(b.GetCumulativeCountFloat(), b.GetCumulativeCount()))
			}
		case count:
			if h != nil {
				fn(labels, either(h.GetSampleCountFloat(), h.GetSampleCount()))
			} else {
				fn(labels, float64(s.GetSampleCount()))
			}
		case sum:
			if h != nil {
				fn(labels, h.GetSampleSum())
			} else {
				fn(labels, s.GetSampleSum())
			}
		case whole:
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				fn(labels, m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				fn(labels, m.GetGauge().GetValue())
			case dto.MetricType_UNTYPED:
				fn(labels, m.GetUntyped().GetValue())
			case dto.MetricType_SUMMARY:
				for _, q := range s.GetQuantile() {
					fn(with(labels, model.QuantileLabel, q.GetQuantile()), q.GetValue())
				}
			default:
				// A histogram has no series under its own name.
			}
		}
	}
}

// either is a histogram count: the parser keeps it as a float only when
// some count in the histogram is not an integer.
func either(f float64, u uint64) float64 {
	if f != 0 {
		return f
	}
	return float64(u)
}

// with is labels plus name="v", formatted as the text format writes floats.
func with(labels []*dto.LabelPair, name string, v float64) []*dto.LabelPair {
	s := strconv.FormatFloat(v, 'g', -1, 64) // +Inf, NaN as exposed
	return append(labels[:len(labels):len(labels)], &dto.LabelPair{Name: &name, Value: &s})
}

var escape = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)

// render writes labels as the text format does, label values escaped.
func render(labels []*dto.LabelPair) string {
	var b strings.Builder
	for i, l := range labels {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(l.GetName())
		b.WriteString(`="`)
		_, _ = escape.WriteString(&b, l.GetValue())
		b.WriteByte('"')
	}
	return b.String()
}
