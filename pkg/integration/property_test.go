//go:build integration

package integration

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/foo-controller/internal/proptest"
	"example.com/foo-controller/pkg/plan"
)

// controllerFieldManager is the controller's field manager (controllerName
// in package main): which manager applies decides which fields conflict.
const controllerFieldManager = "foo-controller"

// TestDriftAgreesWithTheAPIServer is plan's property test with the
// real API server in place of its model: for random valid Foos, what the
// server stores for a server-side apply of DesiredDeployment has no Drift.
// Otherwise the controller would rewrite a correct Deployment on every
// sync, or report a fight with the API server's defaulting.
//
// Everything is a dry run: the Deployment's owner reference need not
// resolve (only the garbage collector reads it, and nothing is stored), so
// the Foos are not created; each is dry-run created only to check that it
// is valid, against the real CRD schema (with its CEL rule). The test also
// checks proptest's model of the server, which the unit test relies on.
func TestDriftAgreesWithTheAPIServer(t *testing.T) {
	t.Parallel()
	const foos = 100
	seed := seedFromEnv(t, "FOO_PROPERTY_SEED")
	rng := rand.New(rand.NewPCG(seed, seed))
	s := newScenario(t)
	dryRun := []string{metav1.DryRunAll}
	start := time.Now()

	for i := range foos {
		foo := proptest.Foo(rng, s.ns)
		fooJSON, _ := json.Marshal(foo)
		if _, err := s.foos.SamplecontrollerV1beta1().Foos(s.ns).Create(s.ctx, foo.DeepCopy(),
			metav1.CreateOptions{DryRun: dryRun}); err != nil {
			t.Fatalf("Foo %d is not valid (the generator is wrong): %v\nFoo: %s", i, err, fooJSON)
		}

		desired := plan.DesiredDeployment(foo)
		served, err := s.kube.AppsV1().Deployments(s.ns).Apply(s.ctx, desired,
			metav1.ApplyOptions{FieldManager: controllerFieldManager, Force: true, DryRun: dryRun})
		if err != nil {
			t.Fatalf("Foo %d: applying its Deployment: %v\nFoo: %s", i, err, fooJSON)
		}
		if drift := plan.Drift(foo, plan.NewDeploymentView(served)); len(drift) != 0 {
			depJSON, _ := json.Marshal(served)
			t.Fatalf("Foo %d: the Deployment it declares, as the API server stores it, drifts from it: %q\nFoo: %s\nDeployment: %s",
				i, drift, fooJSON, depJSON)
		}

		model, err := proptest.Served(desired)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := servedFields(served), servedFields(model); !equality.Semantic.DeepEqual(got, want) {
			gotJSON, _ := json.Marshal(got)
			wantJSON, _ := json.Marshal(want)
			t.Fatalf("Foo %d: proptest.Served, the unit test's model of the API server, is out of date:\nserver: %s\nmodel:  %s\nFoo: %s",
				i, gotJSON, wantJSON, fooJSON)
		}
	}
	t.Logf("%d random Foos in %v", foos, time.Since(start).Round(time.Millisecond))
}

// servedFields is what the API server and proptest.Served must agree on:
// the Deployment's spec, labels and owners. Identity and timestamps are
// the server's to choose; the image pull policy is left out because the
// model does not parse image references as the server does (and Drift
// ignores it).
func servedFields(d *appsv1.Deployment) *appsv1.Deployment {
	d = d.DeepCopy()
	for i := range d.Spec.Template.Spec.Containers {
		d.Spec.Template.Spec.Containers[i].ImagePullPolicy = ""
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: d.Name, Namespace: d.Namespace, Labels: d.Labels, OwnerReferences: d.OwnerReferences},
		Spec:       d.Spec,
	}
}
