package main

import (
	"encoding/json"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	core "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
)

func TestSyncOrphanPolicyAddsFinalizer(t *testing.T) {
	foo := newFoo("a", 1)
	foo.Spec.DeletionPolicy = samplev1beta1.DeletionPolicyOrphan
	dep := ownedDeployment(foo)
	withConvergedStatus(foo, dep, false)
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	kube, foos, _, err := f.sync(keyOf(foo))
	if err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", kube, nil)
	assertActions(t, "foo", foos, []string{"patch foos a " + mergePatch})
	var patch struct {
		Metadata struct {
			ResourceVersion string   `json:"resourceVersion"`
			Finalizers      []string `json:"finalizers"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(foos[0].(core.PatchAction).GetPatch(), &patch); err != nil {
		t.Fatal(err)
	}
	if patch.Metadata.ResourceVersion != foo.ResourceVersion || len(patch.Metadata.Finalizers) != 1 ||
		patch.Metadata.Finalizers[0] != samplev1beta1.OrphanFinalizer {
		t.Errorf("finalizer patch: got %s", foos[0].(core.PatchAction).GetPatch())
	}
}

func TestSyncDeletePolicyRemovesFinalizer(t *testing.T) {
	foo := newFoo("a", 1)
	foo.Finalizers = []string{"other.example.com/keep", samplev1beta1.OrphanFinalizer}
	dep := ownedDeployment(foo)
	withConvergedStatus(foo, dep, false)
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	_, foos, _, err := f.sync(keyOf(foo))
	if err != nil {
		t.Fatal(err)
	}
	assertActions(t, "foo", foos, []string{"patch foos a " + mergePatch})
	if p := string(foos[0].(core.PatchAction).GetPatch()); !strings.Contains(p, `"finalizers":["other.example.com/keep"]`) {
		t.Errorf("must remove only our finalizer: %s", p)
	}
}

func deletingFoo(policy samplev1beta1.DeletionPolicy, finalizers ...string) *samplev1beta1.Foo {
	foo := newFoo("a", 1)
	foo.Spec.DeletionPolicy = policy
	foo.DeletionTimestamp = ptr.To(metav1.NewTime(fixedNow))
	foo.Finalizers = finalizers
	return foo
}

func TestSyncOrphanDeletion(t *testing.T) {
	foo := deletingFoo(samplev1beta1.DeletionPolicyOrphan, samplev1beta1.OrphanFinalizer)
	dep := ownedDeployment(foo)
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	kube, foos, evts, err := f.sync(keyOf(foo))
	if err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", kube, []string{"list deployments", "patch deployments a-deploy " + jsonPatch})
	assertActions(t, "foo", foos, []string{"patch foos a " + mergePatch})
	// Order matters: the owner reference goes first, the finalizer last.
	if want := []string{"list deployments", "patch deployments a-deploy " + jsonPatch, "patch foos a " + mergePatch}; strings.Join(f.ordered, "|") != strings.Join(want, "|") {
		t.Errorf("request order: got %q, want %q", f.ordered, want)
	}
	assertEvents(t, evts, "Normal Orphaned")
	if !strings.Contains(string(kube[1].(core.PatchAction).GetPatch()), `"op":"test"`) {
		t.Errorf("owner reference removal must be guarded by a test op: %s", kube[1].(core.PatchAction).GetPatch())
	}
}

func TestSyncOrphanDeletionAfterCrash(t *testing.T) {
	// The owner reference was removed, then the process died before the
	// finalizer went: the retry only removes the finalizer.
	foo := deletingFoo(samplev1beta1.DeletionPolicyOrphan, samplev1beta1.OrphanFinalizer)
	dep := ownedDeployment(foo)
	dep.OwnerReferences = nil
	f := newFixture(t).withFoo(foo).withDeployment(dep)
	kube, foos, evts, err := f.sync(keyOf(foo))
	if err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", kube, []string{"list deployments"})
	assertActions(t, "foo", foos, []string{"patch foos a " + mergePatch})
	assertEvents(t, evts)
}

func TestSyncOrphanDeletionFindsUncachedDeployment(t *testing.T) {
	foo := deletingFoo(samplev1beta1.DeletionPolicyOrphan, samplev1beta1.OrphanFinalizer)
	f := newFixture(t).withFoo(foo)
	f.kubeobjects = append(f.kubeobjects, ownedDeployment(foo)) // in the API, not yet in the cache
	kube, _, _, err := f.sync(keyOf(foo))
	if err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", kube, []string{"list deployments", "patch deployments a-deploy " + jsonPatch})
}

func TestSyncDeletionWithoutOurFinalizer(t *testing.T) {
	for _, policy := range []samplev1beta1.DeletionPolicy{samplev1beta1.DeletionPolicyDelete, samplev1beta1.DeletionPolicyOrphan} {
		t.Run(string(policy), func(t *testing.T) {
			foo := deletingFoo(policy, "other.example.com/keep")
			f := newFixture(t).withFoo(foo).withDeployment(ownedDeployment(foo))
			kube, foos, _, err := f.sync(keyOf(foo))
			if err != nil {
				t.Fatal(err)
			}
			// Garbage collection deletes the Deployment; nothing for us.
			assertActions(t, "kube", kube, nil)
			assertActions(t, "foo", foos, nil)
		})
	}
}

func TestSyncDeletionSwitchedBackToDelete(t *testing.T) {
	foo := deletingFoo(samplev1beta1.DeletionPolicyDelete, samplev1beta1.OrphanFinalizer)
	f := newFixture(t).withFoo(foo).withDeployment(ownedDeployment(foo))
	kube, foos, _, err := f.sync(keyOf(foo))
	if err != nil {
		t.Fatal(err)
	}
	assertActions(t, "kube", kube, nil)
	assertActions(t, "foo", foos, []string{"patch foos a " + mergePatch})
}
