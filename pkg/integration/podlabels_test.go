//go:build integration

package integration

import (
	"fmt"
	"maps"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/plan"
)

// TestPodLabels walks spec.podLabels through its life on the real API
// server: set, changed, a key dropped on the Foo (removed from the pod
// template, which needs the applied keys' annotation: nothing in the Foo
// names it any more), changed, removed and added to by another writer,
// unset on the Foo. After each step the pod template has exactly the
// labels it should, and the controller wrote at most the number of times
// the step needs.
func TestPodLabels(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	s.startController()
	foo := newFoo("web", "web", 1)
	foo.Spec.Deployment.PodLabels = map[string]string{"team": "a", "tier": "web"}
	s.createFoo(foo)
	s.waitConverged("web", time.Minute)
	created, err := s.getFoo("web")
	if err != nil {
		t.Fatal(err)
	}
	own := plan.Labels(created)
	labels := func(extra map[string]string) map[string]string {
		out := maps.Clone(own)
		maps.Copy(out, extra)
		return out
	}
	edit := func(change func(*appsv1.Deployment)) { s.editDeployment("web", change) }
	setPodLabels := func(l map[string]string) func() {
		return func() { s.updateFoo("web", func(f *samplev1beta1.Foo) { f.Spec.Deployment.PodLabels = l }) }
	}

	steps := []struct {
		name      string
		change    func()
		want      map[string]string
		maxWrites int // the controller's writes of the Deployment
	}{
		{"set on the Foo", func() {}, labels(map[string]string{"team": "a", "tier": "web"}), 0},
		{"changed and added on the Foo", setPodLabels(map[string]string{"team": "a", "tier": "api", "env": "prod"}),
			labels(map[string]string{"team": "a", "tier": "api", "env": "prod"}), 1},
		{"a key dropped on the Foo", setPodLabels(map[string]string{"team": "a", "tier": "api"}),
			labels(map[string]string{"team": "a", "tier": "api"}), 1},
		{"value changed by another writer", func() {
			edit(func(d *appsv1.Deployment) { d.Spec.Template.Labels["team"] = "b" })
		}, labels(map[string]string{"team": "a", "tier": "api"}), 1},
		{"removed by another writer", func() {
			edit(func(d *appsv1.Deployment) { delete(d.Spec.Template.Labels, "team") })
		}, labels(map[string]string{"team": "a", "tier": "api"}), 1},
		{"another label added by another writer (kept)", func() {
			edit(func(d *appsv1.Deployment) { d.Spec.Template.Labels["owner"] = "ops" })
		}, labels(map[string]string{"team": "a", "tier": "api", "owner": "ops"}), 0},
		{"applied keys annotation removed by another writer", func() {
			edit(func(d *appsv1.Deployment) { delete(d.Annotations, plan.PodLabelsAnnotation) })
		}, labels(map[string]string{"team": "a", "tier": "api", "owner": "ops"}), 1},
		{"a key the other writer also set, dropped on the Foo (theirs now)", func() {
			edit(func(d *appsv1.Deployment) { d.Spec.Template.Labels["owner"] = "ops2" })
			s.updateFoo("web", func(f *samplev1beta1.Foo) { f.Spec.Deployment.PodLabels["owner"] = "ops2" })
			s.waitConverged("web", time.Minute)
			s.updateFoo("web", func(f *samplev1beta1.Foo) { delete(f.Spec.Deployment.PodLabels, "owner") })
		}, labels(map[string]string{"team": "a", "tier": "api", "owner": "ops2"}), 2},
		{"unset on the Foo", setPodLabels(nil), labels(map[string]string{"owner": "ops2"}), 1},
	}
	for _, step := range steps {
		before, err := s.getDeployment("web")
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		step.change()
		s.eventually(time.Minute, step.name+": the pod template's labels", func() (bool, string) {
			dep, err := s.getDeployment("web")
			if err != nil {
				return false, err.Error()
			}
			got := dep.Spec.Template.Labels
			return maps.Equal(got, step.want), fmt.Sprintf("labels %v, want %v", got, step.want)
		})
		s.waitConverged("web", time.Minute)
		time.Sleep(2 * time.Second) // settled: no more writes
		after, err := s.getDeployment("web")
		if err != nil {
			t.Fatal(err)
		}
		var deploymentWrites []auditEvent
		for _, e := range writesOf(s.controllerRequests(start, time.Now())) {
			if e.resource() == "deployments" {
				deploymentWrites = append(deploymentWrites, e)
			}
		}
		if len(deploymentWrites) > step.maxWrites {
			t.Errorf("%s: %d Deployment writes, want at most %d:%s", step.name, len(deploymentWrites), step.maxWrites, summarize(deploymentWrites))
		}
		if keys := after.Annotations[plan.PodLabelsAnnotation]; after.Spec.Template.Labels["team"] != "" && keys == "" {
			t.Errorf("%s: no %s annotation", step.name, plan.PodLabelsAnnotation)
		}
		t.Logf("%s: %d Deployment writes, generation %d → %d, annotation %q", step.name, len(deploymentWrites),
			before.Generation, after.Generation, after.Annotations[plan.PodLabelsAnnotation])
	}

	// A value the CRD cannot check (its characters): the API server
	// refuses the Deployment, and the Foo says so. The refused retries are
	// not corrections made: they are no fight either, before or after the
	// fix.
	s.updateFoo("web", func(f *samplev1beta1.Foo) { f.Spec.Deployment.PodLabels = map[string]string{"team": "a b"} })
	s.waitNotReady("web", samplev1beta1.ReasonDeploymentApplyFailed, "labels", time.Minute)
	foo2, _ := s.getFoo("web")
	t.Logf("invalid value: %s", meta.FindStatusCondition(foo2.Status.Conditions, samplev1beta1.ConditionReady).Message)
	time.Sleep(2 * time.Second) // the retries go on: several, a few milliseconds apart at first
	setPodLabels(map[string]string{"team": "a"})()
	s.waitConverged("web", time.Minute)
	if ev := s.fooEvents("web"); ev["Contested"] != 0 {
		t.Errorf("events %v: one-off edits and refused writes are not a fight", ev)
	}
}
