package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
)

// PointAt points the CRD's conversion webhook at url, in place of the
// Service the shipped CRD names: for a control plane on this machine (the
// integration tests, the bench), where nothing routes to a Service. One
// merge patch sets the url and removes the service, which an apply of a
// url over an applied service cannot do (the API server refuses a
// clientConfig holding both).
func PointAt(ctx context.Context, dyn dynamic.Interface, crd, url string) error {
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"conversion": map[string]any{"webhook": map[string]any{
		"clientConfig": map[string]any{"service": nil, "url": url}}}}})
	if err != nil {
		return err
	}
	_, err = dyn.Resource(CRDs).Patch(ctx, crd, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// WaitInjected waits until the CRD's conversion webhook has a caBundle
// (a keeper injected its CA), for up to timeout.
func WaitInjected(ctx context.Context, dyn dynamic.Interface, crd string, timeout time.Duration) error {
	var last error // why the last look found no caBundle
	// The first look at once. Each read is under ctx, not the poll's
	// deadline: one under way at timeout ends, and says why, as before.
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		got, err := dyn.Resource(CRDs).Get(ctx, crd, metav1.GetOptions{})
		if err == nil {
			if b, webhook := caBundleOf(got); webhook && len(b) > 0 {
				return true, nil
			}
			err = errors.New("no caBundle in its conversion webhook")
		}
		last = err
		return false, nil
	})
	if err != nil && ctx.Err() == nil {
		// The timeout, not ctx, ended it.
		return fmt.Errorf("CRD %s, %v on: %w", crd, timeout, last)
	}
	return err
}
