package main

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/plan"
)

// TestSyncDefersANewFoosFirstStatus: a new Foo's first status waits
// statusProgressInterval when all it would say is "progressing", and is
// written at once when it has more to say.
func TestSyncDefersANewFoosFirstStatus(t *testing.T) {
	t.Run("progressing", func(t *testing.T) {
		foo := newFoo("a", 1)
		f := newFixture(t).withFoo(foo)
		_, ctx := ktesting.NewTestContext(t)
		c := f.newController(ctx)
		for _, after := range []time.Duration{0, statusProgressInterval / 2} {
			f.clock.SetTime(fixedNow.Add(after))
			res, err := c.syncHandler(ctx, keyOf(foo))
			if err != nil {
				t.Fatal(err)
			}
			if want := statusProgressInterval - after; res.requeueAfter != want {
				t.Errorf("after %v: the held-back status must come back when it may be written: requeue after %v, want %v",
					after, res.requeueAfter, want)
			}
		}
		assertActions(t, "foo", f.client.Actions(), nil)
		if c.workqueue.Len() != 0 {
			t.Error("the sync must not queue the key itself; handleErr does")
		}
		f.clock.SetTime(fixedNow.Add(statusProgressInterval))
		if _, err := c.syncHandler(ctx, keyOf(foo)); err != nil {
			t.Fatal(err)
		}
		// The fake informer never sees the Deployment created: by now the
		// cache no longer shows it, so the sync asks whether the Foo is
		// still there before creating it again (deletedMeanwhile).
		assertActions(t, "foo", f.client.Actions(), []string{"get foos", "patch foos/status a " + applyPatch})
		st := appliedStatus(t, f.client.Actions())
		if r := readyOf(t, st); r.Status != metav1.ConditionFalse || meta.FindStatusCondition(st.Conditions, samplev1beta1.ConditionReconciling) == nil {
			t.Errorf("first status: Ready %s/%s, conditions %+v", r.Status, r.Reason, st.Conditions)
		}
	})
	t.Run("already available", func(t *testing.T) {
		foo := newFoo("a", 1)
		dep := ownedDeployment(foo) // 1 of 1 available
		_, foos, _, err := newFixture(t).withFoo(foo).withDeployment(dep).sync(keyOf(foo))
		if err != nil {
			t.Fatal(err)
		}
		assertActions(t, "foo", foos, []string{"patch foos/status a " + applyPatch})
	})
}

func TestSyncStatusFollowsDeployment(t *testing.T) {
	foo := newFoo("a", 3)
	dep := ownedDeployment(foo)
	setCounts(dep, 3, 3, 1, false)
	withConvergedStatus(foo, dep, false)
	dep = dep.DeepCopy()
	setCounts(dep, 3, 3, 3, true)
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	kube, foos, evts, err := f.sync(keyOf(foo))
	if err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", kube, nil)
	assertActions(t, "foo", foos, []string{"patch foos/status a " + applyPatch})
	assertEvents(t, evts)
	st := appliedStatus(t, foos)
	if st.AvailableReplicas != 3 || st.ReadyReplicas != 3 || st.Replicas != 3 {
		t.Errorf("counts: got %+v", st)
	}
	c := readyOf(t, st)
	if c.Status != metav1.ConditionTrue || c.Reason != samplev1beta1.ReasonDeploymentAvailable {
		t.Errorf("Ready: got %s/%s", c.Status, c.Reason)
	}
	if !c.LastTransitionTime.Time.Equal(fixedNow) {
		t.Errorf("Ready flipped, so lastTransitionTime must be now: got %v", c.LastTransitionTime)
	}
	if st.Selector != plan.FooUIDLabel+"=a-uid" {
		t.Errorf("selector for the scale subresource: got %q", st.Selector)
	}
}

func TestSyncPacesProgressOnlyStatus(t *testing.T) {
	// A rollout of 3 replicas, watched step by step.
	foo := newFoo("a", 3)
	dep := ownedDeployment(foo)
	setCounts(dep, 3, 1, 0, false)
	withConvergedStatus(foo, dep, false)
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	var last syncResult
	step := func(updated, available int32) {
		t.Helper()
		f.deploymentChanged(dep, func(d *appsv1.Deployment) {
			setCounts(d, 3, updated, available, available == 3) // maxUnavailable of 3 is 0
		})
		var err error
		if last, err = c.syncHandler(ctx, keyOf(foo)); err != nil {
			t.Fatal(err)
		}
	}
	writes := func() int { return len(f.client.Actions()) }

	step(2, 0) // the first change since the controller started: written
	if writes() != 1 {
		t.Fatalf("first progress update: %d writes, want 1", writes())
	}
	step(3, 0) // counts only, right after: held back
	step(3, 1)
	if writes() != 1 {
		t.Errorf("progress-only updates within %v of the last write must wait: %d writes", statusProgressInterval, writes())
	}
	if last.requeueAfter <= 0 || last.requeueAfter > statusProgressInterval {
		t.Errorf("the held-back update must come back within %v: requeue after %v", statusProgressInterval, last.requeueAfter)
	}
	f.clock.Step(statusProgressInterval)
	step(3, 2) // the interval has passed: written
	if writes() != 2 {
		t.Errorf("a progress update after the interval: %d writes, want 2", writes())
	}
	step(3, 3) // Ready flips: written at once
	if writes() != 3 {
		t.Errorf("Ready flipping must be written at once: %d writes, want 3", writes())
	}
	if st := appliedStatus(t, f.client.Actions()[2:]); readyOf(t, st).Status != metav1.ConditionTrue || st.AvailableReplicas != 3 {
		t.Errorf("last status written: %+v", st)
	}
}

func TestSyncReportsRefusedDeployment(t *testing.T) {
	foo := newFoo("a", 1)
	f := newFixture(t).withFoo(foo)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	refusal := apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "a-deploy",
		errors.New("exceeded quota: compute, requested: pods=1, used: pods=10, limited: pods=10"))
	f.kubeclient.PrependReactor("patch", "deployments", func(core.Action) (bool, runtime.Object, error) {
		return true, nil, refusal
	})
	_, err := c.syncHandler(ctx, keyOf(foo))
	if !errors.Is(err, refusal) {
		t.Fatalf("the refusal must still be returned (for retry with backoff): %v", err)
	}
	assertActions(t, "foo", f.client.Actions(), []string{"patch foos/status a " + applyPatch})
	ready := readyOf(t, appliedStatus(t, f.client.Actions()))
	if ready.Reason != samplev1beta1.ReasonDeploymentApplyFailed || !strings.Contains(ready.Message, "exceeded quota") {
		t.Errorf("Ready: %s %q", ready.Reason, ready.Message)
	}
	if n := strings.Count(ready.Message, "a-deploy"); n != 2 {
		t.Errorf("the message names the Deployment %d times, want ours and the API server's: %q", n, ready.Message)
	}
	assertEvents(t, drainEvents(f.recorder), "Warning DeploymentApplyFailed")

	// The retry meets the same refusal: no second Event, no second write.
	f.client.ClearActions()
	if _, err := c.syncHandler(ctx, keyOf(foo)); !errors.Is(err, refusal) {
		t.Fatal(err)
	}
	assertActions(t, "foo", f.client.Actions(), nil)
	assertEvents(t, drainEvents(f.recorder))
}

// TestSyncInATerminatingNamespace: the API server refuses to create
// anything in a namespace being deleted (the Foo's Deployment was deleted
// with it): there is nobody left to tell, and retrying cannot help.
func TestSyncInATerminatingNamespace(t *testing.T) {
	foo := newFoo("a", 1)
	f := newFixture(t).withFoo(foo)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	refusal := &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden,
		Message: `deployments.apps "a-deploy" is forbidden: unable to create new content in namespace default because it is being terminated`,
		Details: &metav1.StatusDetails{Group: "apps", Kind: "deployments", Name: "a-deploy",
			Causes: []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause, Message: "namespace default is being terminated", Field: "metadata.namespace"}}},
	}}
	f.kubeclient.PrependReactor("patch", "deployments", func(core.Action) (bool, runtime.Object, error) {
		return true, nil, refusal
	})
	res, err := c.syncHandler(ctx, keyOf(foo))
	if err != nil || res != (syncResult{}) {
		t.Fatalf("got %+v, %v; want done: no retry", res, err)
	}
	assertActions(t, "foo", f.client.Actions(), nil)
	assertEvents(t, drainEvents(f.recorder))
}

// TestSyncInANamespaceBeingDeleted: the namespaces informer says the
// Foo's namespace is going. Its pods and Deployment going with it are not
// reported, a missing Deployment is not created (the API server would
// refuse it), but an edit of the Foo is still acknowledged: a stuck pod
// can hold a namespace in deletion for as long as it likes.
func TestSyncInANamespaceBeingDeleted(t *testing.T) {
	foo := newFoo("a", 2)
	dep := ownedDeployment(foo)
	withConvergedStatus(foo, dep, false)
	going := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNS, DeletionTimestamp: ptr.To(metav1.NewTime(fixedNow))},
		Status: corev1.NamespaceStatus{Phase: corev1.NamespaceTerminating}}
	lost := dep.DeepCopy() // its pods deleted
	lost.Status.AvailableReplicas, lost.Status.ReadyReplicas = 0, 0
	lost.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionFalse, Reason: "MinimumReplicasUnavailable"}}

	for _, tc := range []struct {
		name      string
		namespace *corev1.Namespace
		foo       *samplev1beta1.Foo
		dep       *appsv1.Deployment
		wantKube  []string
		wantFoo   []string
	}{
		{"pods lost", going, foo, lost, nil, nil},
		{"Deployment gone", going, foo, nil, nil, nil},
		{"Foo edited", going, func() *samplev1beta1.Foo { e := foo.DeepCopy(); e.Generation = 2; return e }(), lost,
			nil, []string{"patch foos/status a " + applyPatch}},
		{"pods lost, namespace not going", nil, foo, lost, nil, []string{"patch foos/status a " + applyPatch}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t).withFoo(tc.foo)
			if tc.dep != nil {
				f.withDeployment(tc.dep)
			}
			if tc.namespace != nil {
				f.withNamespace(tc.namespace)
			}
			_, ctx := ktesting.NewTestContext(t)
			c := f.newController(ctx)
			if _, err := c.syncHandler(ctx, keyOf(tc.foo)); err != nil {
				t.Fatal(err)
			}
			assertActions(t, "kube", f.kubeclient.Actions(), tc.wantKube)
			assertActions(t, "foo", f.client.Actions(), tc.wantFoo)
		})
	}
}

// TestSyncRefusedUpdateReportsWhatStillServes: when the API server refuses
// the apply for a Deployment that exists (a scale-up over quota, say), the
// old Deployment keeps serving, and the status says so next to the
// refusal.
func TestSyncRefusedUpdateReportsWhatStillServes(t *testing.T) {
	foo := newFoo("a", 2)
	dep := ownedDeployment(foo)
	withConvergedStatus(foo, dep, false)
	foo.Spec.Deployment.Replicas = ptr.To[int32](5) // kubectl scale foo/a --replicas=5
	foo.Generation = 2
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	_, ctx := ktesting.NewTestContext(t)
	c := f.newController(ctx)
	refusal := apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "a-deploy",
		errors.New("exceeded quota: compute, requested: pods=3, used: pods=2, limited: pods=4"))
	f.kubeclient.PrependReactor("patch", "deployments", func(core.Action) (bool, runtime.Object, error) {
		return true, nil, refusal
	})
	if _, err := c.syncHandler(ctx, keyOf(foo)); !errors.Is(err, refusal) {
		t.Fatalf("the refusal must still be returned (for retry with backoff): %v", err)
	}
	st := appliedStatus(t, f.client.Actions())
	if ready := readyOf(t, st); ready.Reason != samplev1beta1.ReasonDeploymentApplyFailed {
		t.Errorf("Ready: %s %q", ready.Reason, ready.Message)
	}
	if st.Replicas != 2 || st.ReadyReplicas != 2 || st.AvailableReplicas != 2 {
		t.Errorf("the old Deployment still serves 2 replicas; status reports replicas=%d ready=%d available=%d",
			st.Replicas, st.ReadyReplicas, st.AvailableReplicas)
	}
}

// TestSyncStatusWriteFailures: a status write that finds the Foo gone is
// the end of its life, not an error; any other failure is returned, for a
// retry with backoff.
func TestSyncStatusWriteFailures(t *testing.T) {
	foos := schema.GroupResource{Group: samplev1beta1.GroupVersion.Group, Resource: "foos"}
	tests := []struct {
		name    string
		err     error
		wantErr bool
	}{
		{"Foo deleted meanwhile", apierrors.NewNotFound(foos, "a"), false},
		{"API server unavailable", apierrors.NewServiceUnavailable("etcd is down"), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			foo := newFoo("a", 1)
			dep := ownedDeployment(foo)
			f := newFixture(t).withFoo(foo).withDeployment(dep)
			_, ctx := ktesting.NewTestContext(t)
			c := f.newController(ctx)
			f.client.PrependReactor("patch", "foos", func(core.Action) (bool, runtime.Object, error) {
				return true, nil, tc.err
			})
			res, err := c.syncHandler(ctx, keyOf(foo))
			if (err != nil) != tc.wantErr || (tc.wantErr && !errors.Is(err, tc.err)) {
				t.Fatalf("got %v, want error %v", err, tc.wantErr)
			}
			if res.requeueAfter != 0 {
				t.Errorf("requeue after %v, want none", res.requeueAfter)
			}
			assertEvents(t, drainEvents(f.recorder))
		})
	}
}

// TestSyncReportsAnApplyThatKeepsFailing: an admission webhook the API
// server cannot call fails every apply with a 500, which may lift by
// itself and is retried as transient; once plan.ReportAfterFailures syncs in a
// row have failed so, the Foo says why (with one Event), and it is still
// retried. An overloaded API server (503) is never reported, and its
// failures do not count toward the webhook's: a status write would only
// add to the load.
func TestSyncReportsAnApplyThatKeepsFailing(t *testing.T) {
	webhook := apierrors.NewInternalError(errors.New(`failed calling webhook "deployments.policy.example.com": failed to call webhook: Post "https://policy.example.svc:443/validate": dial tcp 10.96.0.9:443: connect: connection refused`))
	overloaded := apierrors.NewServiceUnavailable("the server is currently unable to handle the request")
	repeat := func(err error, n int) []error { return slices.Repeat([]error{err}, n) }
	for _, tc := range []struct {
		name     string
		answers  []error // one per sync, the last one checked
		reported bool
	}{
		{"webhook, first failures", repeat(webhook, plan.ReportAfterFailures-1), false},
		{"webhook, persisting", repeat(webhook, plan.ReportAfterFailures), true},
		{"API server overloaded, persisting", repeat(overloaded, 3*plan.ReportAfterFailures), false},
		{"webhook after an overload", append(repeat(overloaded, plan.ReportAfterFailures), webhook), false},
		{"webhook, an overload in between", append(append(repeat(webhook, plan.ReportAfterFailures-1), overloaded), webhook), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			foo := newFoo("a", 1)
			f := newFixture(t).withFoo(foo)
			_, ctx := ktesting.NewTestContext(t)
			c := f.newController(ctx)
			var answer error
			f.kubeclient.PrependReactor("patch", "deployments", func(core.Action) (bool, runtime.Object, error) {
				return true, nil, answer
			})
			var err error
			for _, answer = range tc.answers {
				f.client.ClearActions()
				drainEvents(f.recorder)
				if _, err = c.syncHandler(ctx, keyOf(foo)); !errors.Is(err, answer) {
					t.Fatalf("the error must still be returned (for retry with backoff): %v", err)
				}
			}
			if !tc.reported {
				assertActions(t, "foo", f.client.Actions(), nil)
				assertEvents(t, drainEvents(f.recorder))
				return
			}
			ready := readyOf(t, appliedStatus(t, f.client.Actions()))
			if ready.Reason != samplev1beta1.ReasonDeploymentApplyFailed || !strings.Contains(ready.Message, "failed calling webhook") {
				t.Errorf("Ready: %s %q", ready.Reason, ready.Message)
			}
			assertEvents(t, drainEvents(f.recorder), "Warning DeploymentApplyFailed")
		})
	}
}
