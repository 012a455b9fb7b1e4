//go:build integration

package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"

	"example.com/foo-controller/pkg/shard"
)

// TestShardSelectorOnTheAPIServer: with ShardedListAndWatch on (as the
// local control plane runs it), the API server lists and watches, for a
// slot's selector, exactly the Foos and Deployments of the namespaces
// shard.Slots.Of puts in that slot, and the probe says so; with the gate
// off it drops the selector and sends everything, and the probe says that.
func TestShardSelectorOnTheAPIServer(t *testing.T) {
	t.Parallel()
	const slots = shard.Slots(4)
	run := utilrand.String(6)
	label := "shard-test=" + run
	var spaces []*scenario
	for range 8 {
		spaces = append(spaces, newScenario(t))
	}
	s := spaces[0]
	for _, sp := range spaces {
		foo := newFoo("f", "f", 0)
		foo.Labels = map[string]string{"shard-test": run}
		sp.createFoo(foo)
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "d", Labels: map[string]string{"shard-test": run}},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](0),
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "d"}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "d"}},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}},
				},
			},
		}
		if _, err := sp.kube.AppsV1().Deployments(sp.ns).Create(s.ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	listFoos := func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return s.foos.SamplecontrollerV1beta1().Foos(metav1.NamespaceAll).List(ctx, o)
	}
	listDeployments := func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return s.kube.AppsV1().Deployments(metav1.NamespaceAll).List(ctx, o)
	}
	if ok, err := shard.ServerFilters(s.ctx, listDeployments); err != nil || !ok {
		t.Errorf("ServerFilters = %v, %v; want true with the gate on", ok, err)
	}
	// Foos are filtered too (below), but kube-apiserver 1.36 does not
	// echo the selector for a custom resource: why the probe lists
	// Deployments.
	if ok, _ := shard.ServerFilters(s.ctx, listFoos); ok {
		t.Logf("the API server now echoes shardInfo for a custom resource too")
	}

	seen := map[int]bool{}
	for i := range int(slots) {
		var want []string
		for _, sp := range spaces {
			if slots.Of(sp.ns) == i {
				want = append(want, sp.ns)
			}
		}
		seen[i] = len(want) > 0
		opts := metav1.ListOptions{LabelSelector: label, ShardSelector: mustSelector(t, slots, i)}
		foos, err := s.foos.SamplecontrollerV1beta1().Foos(metav1.NamespaceAll).List(s.ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		deps, err := s.kube.AppsV1().Deployments(metav1.NamespaceAll).List(s.ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		var gotFoos, gotDeps []string
		for _, f := range foos.Items {
			gotFoos = append(gotFoos, f.Namespace)
		}
		for _, d := range deps.Items {
			gotDeps = append(gotDeps, d.Namespace)
		}
		slices.Sort(want)
		slices.Sort(gotFoos)
		slices.Sort(gotDeps)
		if !slices.Equal(gotFoos, want) || !slices.Equal(gotDeps, want) {
			t.Errorf("slot %d: Foos in %v, Deployments in %v; want both in %v", i, gotFoos, gotDeps, want)
		}
		if deps.ShardInfo == nil || deps.ShardInfo.Selector != opts.ShardSelector {
			t.Errorf("slot %d: the Deployment list's shardInfo is %+v, want the selector echoed", i, deps.ShardInfo)
		}
	}
	t.Logf("8 namespaces over %d slots: slots with some %v", slots, seen)

	// The API server parses what Selector writes for slot counts that do
	// not divide 2^64 too, and filters by it as Of says.
	for _, n := range []shard.Slots{7, 100, 256} {
		for _, sp := range spaces {
			i := n.Of(sp.ns)
			for _, sel := range [][]int{{i}, {(i + 1) % int(n)}, {0, (i + 2) % int(n), int(n) - 1}} {
				opts := metav1.ListOptions{LabelSelector: label, ShardSelector: mustSelector(t, n, sel...)}
				foos, err := s.foos.SamplecontrollerV1beta1().Foos(sp.ns).List(s.ctx, opts)
				if err != nil {
					t.Fatalf("%d slots, selector %s: %v", n, opts.ShardSelector, err)
				}
				if want := slices.Contains(sel, i); (len(foos.Items) == 1) != want {
					t.Errorf("%d slots, namespace %s in slot %d: %d Foos listed with the selector for %v", n, sp.ns, i, len(foos.Items), sel)
				}
			}
		}
	}

	// A watch with a slot's selector sees that slot's changes only.
	slot := slots.Of(spaces[0].ns)
	w, err := s.foos.SamplecontrollerV1beta1().Foos(metav1.NamespaceAll).Watch(s.ctx,
		metav1.ListOptions{LabelSelector: label, ShardSelector: mustSelector(t, slots, slot), ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for _, sp := range spaces {
		foo := newFoo("g", "g", 0)
		foo.Labels = map[string]string{"shard-test": run}
		sp.createFoo(foo)
	}
	var want, got []string
	for _, sp := range spaces {
		if slots.Of(sp.ns) == slot {
			want = append(want, sp.ns+"/f", sp.ns+"/g")
		}
	}
	timeout := time.After(10 * time.Second)
	for len(got) < len(want) {
		select {
		case ev := <-w.ResultChan():
			if m, err := objectName(ev.Object); err == nil {
				got = append(got, m)
			}
		case <-timeout:
			t.Fatalf("watch of slot %d: got %v, want %v", slot, got, want)
		}
	}
	select {
	case ev := <-w.ResultChan():
		if m, err := objectName(ev.Object); err == nil {
			got = append(got, m)
		}
	case <-time.After(2 * time.Second):
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("watch of slot %d: got %v, want %v", slot, got, want)
	}

	t.Run("gate off", func(t *testing.T) {
		cl := privateCluster(t, clusterOptions{apiserverFlags: map[string]string{"feature-gates": "ShardedListAndWatch=false"}})
		p := newScenarioOn(t, cl)
		p.createFoo(newFoo("f", "f", 0))
		other := slots.Of(p.ns) + 1
		opts := metav1.ListOptions{ShardSelector: mustSelector(t, slots, other%int(slots))}
		foos, err := p.foos.SamplecontrollerV1beta1().Foos(p.ns).List(p.ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		if len(foos.Items) != 1 {
			t.Errorf("gate off: %d Foos of another slot's namespace listed; want the selector ignored", len(foos.Items))
		}
		list := func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return p.kube.AppsV1().Deployments(p.ns).List(ctx, o)
		}
		if ok, err := shard.ServerFilters(p.ctx, list); err != nil || ok {
			t.Errorf("gate off: ServerFilters = %v, %v; want false", ok, err)
		}
	})
}

func mustSelector(t *testing.T, n shard.Slots, slots ...int) string {
	t.Helper()
	s, err := n.Selector(slots)
	if err != nil {
		t.Fatal(err)
	}
	return s.String()
}

// objectName names a watched object namespace/name.
func objectName(obj runtime.Object) (string, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s/%s", m.GetNamespace(), m.GetName()), nil
}
