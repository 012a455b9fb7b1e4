package plan

import (
	"encoding/json"
	"math/rand/v2"
	"testing"

	"example.com/foo-controller/internal/proptest"
)

// FuzzDriftAgreesWithDesiredDeployment: the Deployment DesiredDeployment
// declares, as the API server stores it, has no drift. Drift and
// DesiredDeployment are written separately; if one gains, loses or
// changes a field the other does not, the controller either rewrites a
// correct Deployment on every sync (and reports a fight with itself) or
// never puts back a field it declares.
//
// `go test` runs the seeds below (a few hundred random valid Foos);
// `go test -fuzz=FuzzDriftAgreesWithDesiredDeployment ./pkg/plan/`
// searches further. A failing seed prints its Foo.
func FuzzDriftAgreesWithDesiredDeployment(f *testing.F) {
	for seed := range uint64(300) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		foo := proptest.Foo(rand.New(rand.NewPCG(seed, seed)), "ns")
		dep, err := proptest.Served(DesiredDeployment(foo))
		if err != nil {
			t.Fatal(err)
		}
		if drift := Drift(foo, NewDeploymentView(dep)); len(drift) != 0 {
			fooJSON, _ := json.Marshal(foo)
			depJSON, _ := json.Marshal(dep)
			t.Fatalf("the Deployment a Foo declares drifts from it: %q\nFoo: %s\nDeployment: %s", drift, fooJSON, depJSON)
		}
	})
}

// The property holds only if the model of the API server really adds
// what Drift must ignore; otherwise it compares DesiredDeployment with
// itself.
func TestServedAddsDefaults(t *testing.T) {
	dep, err := proptest.Served(DesiredDeployment(testFoo()))
	if err != nil {
		t.Fatal(err)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	if dep.UID == "" || dep.Spec.RevisionHistoryLimit == nil || dep.Spec.Strategy.RollingUpdate == nil ||
		dep.Spec.Template.Spec.RestartPolicy == "" || c.TerminationMessagePath == "" || c.ImagePullPolicy == "" {
		t.Errorf("Served added no server fields: %+v", dep)
	}
}
