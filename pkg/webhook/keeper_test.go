package webhook

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"
)

// TestKeeperHoldsOffAFight: past writeBurst writes within writeWindow the
// keeper refuses to write, saying what to look for, and writes again once
// the window has passed.
func TestKeeperHoldsOffAFight(t *testing.T) {
	now := t0
	k := &Keeper{Now: func() time.Time { return now }}
	for i := range writeBurst {
		if err := k.mayWrite("the Secret"); err != nil {
			t.Fatalf("write %d refused: %v", i+1, err)
		}
		now = now.Add(time.Second)
	}
	err := k.mayWrite("the Secret")
	if err == nil || !strings.Contains(err.Error(), "holding off writing the Secret") || !strings.Contains(err.Error(), "GitOps") {
		t.Fatalf("write %d: %v, want it held off", writeBurst+1, err)
	}
	now = now.Add(writeWindow)
	if err := k.mayWrite("the Secret"); err != nil {
		t.Errorf("after the window: %v", err)
	}
}

// TestKeeperWarnsOfAHostItLacks: a CRD that sends reviews to a host the
// certificate is not issued for is named in the log once each time it
// changes, by URL or by Service, whatever form the host is written in.
func TestKeeperWarnsOfAHostItLacks(t *testing.T) {
	crd := func(clientConfig map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"conversion": map[string]any{
			"strategy": "Webhook", "webhook": map[string]any{"clientConfig": clientConfig}}}}}
	}
	k := &Keeper{Hosts: []string{"localhost", "foo-controller-webhook.foo-system.svc"}}
	for _, tc := range []struct {
		name string
		crd  *unstructured.Unstructured
		want string
	}{
		{"a URL of a host it has", crd(map[string]any{"url": "https://LOCALHOST:9443/convert"}), ""},
		{"a URL of a host it lacks", crd(map[string]any{"url": "https://127.0.0.1:9443/convert"}), "127.0.0.1"},
		{"the same again: warned once", crd(map[string]any{"url": "https://127.0.0.1:9443/convert"}), ""},
		{"the Service it has", crd(map[string]any{"service": map[string]any{"name": "foo-controller-webhook", "namespace": "foo-system"}}), ""},
		{"another Service", crd(map[string]any{"service": map[string]any{"name": "foo-webhook", "namespace": "foo-system"}}), "foo-webhook.foo-system.svc"},
		{"no URL and no Service", crd(map[string]any{}), ""},
	} {
		if got := k.warnHost(klog.Background(), tc.crd); got != tc.want {
			t.Errorf("%s: warned of %q, want %q", tc.name, got, tc.want)
		}
	}
}
