package plan

import (
	"maps"
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
)

// CachedFoo interns, in place, the strings of foo that repeat across Foos
// (see intern) and returns it: what the controller's informer keeps of
// each Foo. Nothing is dropped: the controller reads the whole Foo (its
// status too, to write only what changed).
func CachedFoo(foo *samplev1beta1.Foo) *samplev1beta1.Foo {
	foo.APIVersion, foo.Kind = intern(foo.APIVersion), intern(foo.Kind)
	foo.Namespace = intern(foo.Namespace)
	foo.Spec.Deployment.Image = intern(foo.Spec.Deployment.Image)
	for i := range foo.Status.Conditions {
		c := &foo.Status.Conditions[i]
		c.Type, c.Status = intern(c.Type), metav1.ConditionStatus(intern(string(c.Status)))
		c.Reason, c.Message = intern(c.Reason), intern(c.Message)
	}
	return foo
}

// intern returns s, or an equal string that other cached objects already
// hold: a decoded object has its own copy of every string, and most of
// those (namespaces, label keys, kinds, images, port names, condition
// reasons) are the same in thousands of objects. Values that are unique
// (names, UIDs) are not interned: that would only add an entry to the
// table.
func intern(s string) string { return unique.Make(s).Value() }

// internKeys returns m with interned keys, in a new map.
func internKeys(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[intern(k)] = v
	}
	return out
}

// shared returns the first of candidates equal to m, or m itself.
func shared(m map[string]string, candidates ...map[string]string) map[string]string {
	if len(m) == 0 {
		return m
	}
	for _, c := range candidates {
		if maps.Equal(m, c) {
			return c
		}
	}
	return m
}
