package webhook

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
)

// TestWaitInjected: a caBundle there is seen at the first look; none by
// the timeout says what the last look found; ctx ending first is ctx's
// error.
func TestWaitInjected(t *testing.T) {
	dyn := func(caBundle string) *dynamicfake.FakeDynamicClient {
		return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
			map[schema.GroupVersionResource]string{CRDs: "CustomResourceDefinitionList"}, webhookCRD(nil, caBundle))
	}
	const name = "foos.samplecontroller.example.com"
	// No time at all: only a first look at once sees it.
	if err := WaitInjected(t.Context(), dyn(base64.StdEncoding.EncodeToString([]byte("CA"))), name, 0); err != nil {
		t.Errorf("injected: %v, want it seen at the first look", err)
	}
	err := WaitInjected(t.Context(), dyn(""), name, 250*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "no caBundle") || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("not injected: %v, want why the last look failed", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(150*time.Millisecond, cancel)
	if err := WaitInjected(ctx, dyn(""), name, time.Minute); !errors.Is(err, context.Canceled) {
		t.Errorf("ctx cancelled: %v, want context.Canceled", err)
	}
}
