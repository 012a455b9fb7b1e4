//go:build integration

package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/retry"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/utils/ptr"

	samplev1alpha1 "example.com/foo-controller/pkg/apis/samplecontroller/v1alpha1"
	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	applyv1alpha1 "example.com/foo-controller/pkg/generated/applyconfiguration/samplecontroller/v1alpha1"
	applyv1beta1 "example.com/foo-controller/pkg/generated/applyconfiguration/samplecontroller/v1beta1"
	fooscheme "example.com/foo-controller/pkg/generated/clientset/versioned/scheme"
	"example.com/foo-controller/pkg/metrics"
	"example.com/foo-controller/pkg/plan"
	"example.com/foo-controller/pkg/storagemigrate"
	"example.com/foo-controller/pkg/webhook"
)

const fooCRD = "foos.samplecontroller.example.com"

// conversionWebhook runs the webhook (pkg/webhook: its certificate keeper
// and its TLS server) in the test process on an ephemeral port of
// 127.0.0.1, and returns its URL, the function that stops it, and a
// second keeper of the same Secret started at the same moment, as another
// replica's would be.
func conversionWebhook(t *testing.T, s *scenario, secretNamespace string) (url string, stop func(), other *webhook.Keeper) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	keeper := &webhook.Keeper{Kube: s.kube, Dynamic: s.dyn, CRD: fooCRD, Hosts: []string{"127.0.0.1"},
		Secret: types.NamespacedName{Namespace: secretNamespace, Name: "foo-controller-webhook-cert"}}
	other = &webhook.Keeper{Kube: s.kube, Dynamic: s.dyn, CRD: keeper.CRD, Hosts: keeper.Hosts, Secret: keeper.Secret}
	ctx, cancel := context.WithCancel(context.WithoutCancel(s.ctx))
	otherKept := make(chan error, 1)
	go func() { otherKept <- other.Run(ctx) }()
	stopServing := runWebhook(t, lis, keeper, webhook.NewConverter(fooscheme.Scheme))
	stop = sync.OnceFunc(func() {
		stopServing()
		cancel()
		if err := <-otherKept; err != nil {
			t.Errorf("webhook: %v", err)
		}
	})
	t.Cleanup(stop)
	return "https://" + lis.Addr().String() + webhook.Path, stop, other
}

// webhookAddress is the address the controller serves its webhook on, as
// its log says (it was given port 0).
func (s *scenario) webhookAddress(ctrl *process) string {
	s.t.Helper()
	var addr string
	s.eventually(30*time.Second, "the webhook served", func() (bool, string) {
		for _, l := range ctrl.logLines("Serving the conversion webhook") {
			if m := regexp.MustCompile(`address="([^"]+)"`).FindStringSubmatch(l); m != nil {
				addr = m[1]
				return true, ""
			}
		}
		return false, "no log line"
	})
	return addr
}

// runWebhook runs the webhook (webhook.Run: keeper and server) on lis until
// the returned stop, which waits for it and fails the test on its error.
// Its context is not the test's, which ends before the cleanups that may
// still need it; stop runs once, whoever calls it first (a test that fails
// between stopping and restarting it stops it again in its cleanup).
func runWebhook(t *testing.T, lis net.Listener, keeper *webhook.Keeper, converter http.Handler) (stop func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan error, 1)
	go func() { done <- webhook.Run(ctx, lis, keeper, converter) }()
	return sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("webhook: %v", err)
		}
	})
}

// serveV1beta1 points the CRD's conversion at the webhook at url, with no
// caBundle (the keeper injects it): the shipped CRD serves v1beta1 beside
// the stored v1alpha1 already, through a Service nothing routes to here.
func serveV1beta1(t *testing.T, s *scenario, url string) {
	t.Helper()
	patch, _ := json.Marshal([]map[string]any{{"op": "replace", "path": "/spec/conversion", "value": map[string]any{
		"strategy": "Webhook",
		"webhook":  map[string]any{"conversionReviewVersions": []string{"v1"}, "clientConfig": map[string]any{"url": url}},
	}}})
	if _, err := s.dyn.Resource(webhook.CRDs).Patch(s.ctx, fooCRD, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestConversionWebhook: with v1beta1 served beside v1alpha1 through the
// webhook on a real API server, a Foo written in either version reads in
// the other, v1beta1's own field survives a v1alpha1 client's
// read-modify-write, two replicas' keepers agree on one certificate,
// server-side apply from both versions tracks one set
// of owners, the scale subresource and printer columns follow each
// version's paths; with the webhook down, only the other version fails,
// and nothing stored changes.
func TestConversionWebhook(t *testing.T) {
	cl := privateCluster(t, clusterOptions{noConversionWebhook: true})
	s := newScenarioOn(t, cl)
	metrics.Register("test", "")
	url, stop, other := conversionWebhook(t, s, s.ns)
	serveV1beta1(t, s, url)

	// The keeper creates the Secret and injects its CA into the CRD.
	s.eventually(30*time.Second, "the CA bundle injected", func() (bool, string) {
		secret, err := s.kube.CoreV1().Secrets(s.ns).Get(s.ctx, "foo-controller-webhook-cert", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		crd, err := s.dyn.Resource(webhook.CRDs).Get(s.ctx, fooCRD, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		b64, _, _ := unstructured.NestedString(crd.Object, "spec", "conversion", "webhook", "clientConfig", "caBundle")
		return secret.Type == corev1.SecretTypeTLS && b64 == base64.StdEncoding.EncodeToString(secret.Data[webhook.KeyCABundle]),
			fmt.Sprintf("Secret of type %s, caBundle of %d characters", secret.Type, len(b64))
	})
	// The other replica's keeper, started at the same moment, serves the
	// Secret's certificate too: one of them created it, the other took it.
	secret, err := s.kube.CoreV1().Secrets(s.ns).Get(s.ctx, "foo-controller-webhook-cert", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.eventually(10*time.Second, "the other replica serving the Secret's certificate", func() (bool, string) {
		c, err := other.GetCertificate(nil)
		if err != nil {
			return false, err.Error()
		}
		want, _ := tls.X509KeyPair(secret.Data[webhook.KeyCert], secret.Data[webhook.KeyKey])
		return bytes.Equal(c.Certificate[0], want.Certificate[0]), "another certificate"
	})
	// A keeper of another Secret (a second installation, or `make run`
	// against a cluster that has one) serves, but leaves the CRD's
	// caBundle to the Secret named in its annotation.
	foreign := &webhook.Keeper{Kube: s.kube, Dynamic: s.dyn, CRD: fooCRD, Hosts: []string{"127.0.0.1"},
		Secret: types.NamespacedName{Namespace: s.ns, Name: "another-installation"}}
	crdBefore, err := s.dyn.Resource(webhook.CRDs).Get(s.ctx, fooCRD, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fctx, fcancel := context.WithCancel(s.ctx)
	fdone := make(chan error, 1)
	go func() { fdone <- foreign.Run(fctx) }()
	s.eventually(10*time.Second, "the other installation serving its own certificate", func() (bool, string) {
		_, err := foreign.GetCertificate(nil)
		return err == nil, fmt.Sprint(err)
	})
	time.Sleep(2 * time.Second) // its retries, had it fought
	fcancel()
	if err := <-fdone; err != nil {
		t.Fatal(err)
	}
	crdAfter, err := s.dyn.Resource(webhook.CRDs).Get(s.ctx, fooCRD, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if crdAfter.GetGeneration() != crdBefore.GetGeneration() || crdAfter.GetAnnotations()[webhook.CABundleFromAnnotation] != s.ns+"/foo-controller-webhook-cert" {
		t.Fatalf("the CRD changed under another installation's keeper: generation %d -> %d, caBundle from %q",
			crdBefore.GetGeneration(), crdAfter.GetGeneration(), crdAfter.GetAnnotations()[webhook.CABundleFromAnnotation])
	}

	// The expiry an alert watches: a year from now.
	if exp, err := testutil.GetGaugeMetricValue(metrics.WebhookCertificateExpiry); err != nil ||
		time.Until(time.Unix(int64(exp), 0)) < webhook.CertValidity-time.Hour || time.Until(time.Unix(int64(exp), 0)) > webhook.CertValidity {
		t.Errorf("webhook_certificate_expiry_timestamp_seconds = %v (%v), want a year from now", exp, err)
	}

	beta := s.foos.SamplecontrollerV1beta1().Foos(s.ns)
	alpha := s.foos.SamplecontrollerV1alpha1().Foos(s.ns)
	s.eventually(30*time.Second, "v1beta1 served", func() (bool, string) {
		_, err := beta.List(s.ctx, metav1.ListOptions{})
		return err == nil, fmt.Sprint(err)
	})

	// Written in v1alpha1 (its default image filled in), read in v1beta1.
	if _, err := alpha.Create(s.ctx, &samplev1alpha1.Foo{ObjectMeta: metav1.ObjectMeta{Name: "a"},
		Spec: samplev1alpha1.FooSpec{DeploymentName: "web-a", Replicas: ptr.To[int32](2)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := beta.Get(s.ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d := got.Spec.Deployment; d.Name != "web-a" || ptr.Deref(d.Replicas, 0) != 2 || d.Image != "nginx:1.27" {
		t.Fatalf("v1beta1 reads spec.deployment %+v", d)
	}

	// v1beta1's own fields, through a v1alpha1 client's read-modify-write.
	got.Spec.Deployment.MinReadySeconds = 30
	got.Spec.Deployment.RevisionHistoryLimit = ptr.To[int32](4)
	if _, err := beta.Update(s.ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	old, err := alpha.Get(s.ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m, h := old.Annotations[samplev1alpha1.MinReadySecondsAnnotation], old.Annotations[samplev1alpha1.RevisionHistoryLimitAnnotation]; m != "30" || h != "4" {
		t.Fatalf("v1alpha1 reads the annotations %q and %q, want 30 and 4", m, h)
	}
	old.Spec.Replicas = ptr.To[int32](3)
	if _, err := alpha.Update(s.ctx, old, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Then v1alpha1 writers that send one field's annotation alone: the
	// other field stays, whatever they send (one value out of bounds
	// drops that value alone, where no admission policy refuses it:
	// TestV1alpha1AnnotationsPolicy; null removes it, as for any
	// annotation).
	for _, step := range []struct {
		patch             string
		minReady, history int32 // -1: unset
	}{
		{"", 30, 4}, // the read-modify-write above
		{fmt.Sprintf(`{%q:"2"}`, samplev1alpha1.RevisionHistoryLimitAnnotation), 30, 2},
		{fmt.Sprintf(`{%q:"101"}`, samplev1alpha1.RevisionHistoryLimitAnnotation), 30, -1},
		{fmt.Sprintf(`{%q:"0"}`, samplev1alpha1.RevisionHistoryLimitAnnotation), 30, 0},
		{fmt.Sprintf(`{%q:"3601"}`, samplev1alpha1.MinReadySecondsAnnotation), 0, 0},
		{fmt.Sprintf(`{%q:"45"}`, samplev1alpha1.MinReadySecondsAnnotation), 45, 0},
		{fmt.Sprintf(`{%q:null}`, samplev1alpha1.RevisionHistoryLimitAnnotation), 45, -1},
	} {
		if step.patch != "" {
			if _, err := alpha.Patch(s.ctx, "a", types.MergePatchType, []byte(`{"metadata":{"annotations":`+step.patch+`}}`), metav1.PatchOptions{}); err != nil {
				t.Fatalf("v1alpha1 patch of the annotations %s: %v", step.patch, err)
			}
		}
		if got, err = beta.Get(s.ctx, "a", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		d := got.Spec.Deployment
		if d.MinReadySeconds != max(step.minReady, 0) || ptr.Deref(d.RevisionHistoryLimit, -1) != step.history || ptr.Deref(d.Replicas, 0) != 3 {
			t.Fatalf("after the v1alpha1 patch %s: minReadySeconds %d, revisionHistoryLimit %d, replicas %d; want %d, %d, 3",
				step.patch, d.MinReadySeconds, ptr.Deref(d.RevisionHistoryLimit, -1), ptr.Deref(d.Replicas, 0), step.minReady, step.history)
		}
		if len(got.Annotations) != 0 {
			t.Fatalf("v1beta1 holds annotations %v; want conversion's removed", got.Annotations)
		}
	}

	// v1beta1's own defaults and validation, at admission: replicas and
	// deletionPolicy defaulted, the image required (v1alpha1's default is
	// gone) and pinned, the controller's labels refused.
	created, err := beta.Create(s.ctx, &samplev1beta1.Foo{ObjectMeta: metav1.ObjectMeta{Name: "d"},
		Spec: samplev1beta1.FooSpec{Deployment: samplev1beta1.DeploymentSpec{Name: "web-d", Image: "nginx:1.29"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ptr.Deref(created.Spec.Deployment.Replicas, 0) != 1 || created.Spec.DeletionPolicy != samplev1beta1.DeletionPolicyDelete {
		t.Errorf("v1beta1 defaults: replicas %v, deletionPolicy %q", created.Spec.Deployment.Replicas, created.Spec.DeletionPolicy)
	}
	for _, tc := range []struct {
		name string
		d    samplev1beta1.DeploymentSpec
		says string
	}{
		{"no image", samplev1beta1.DeploymentSpec{Name: "web-e"}, "spec.deployment.image"}, // the typed client sends "": too short
		{"the latest tag", samplev1beta1.DeploymentSpec{Name: "web-e", Image: "nginx:latest"}, "image must be pinned"},
		{"a controller's label", samplev1beta1.DeploymentSpec{Name: "web-e", Image: "nginx:1.29",
			PodLabels: map[string]string{"app.kubernetes.io/managed-by": "me"}}, "the controller's own labels"},
		{"minReadySeconds over an hour", samplev1beta1.DeploymentSpec{Name: "web-e", Image: "nginx:1.29", MinReadySeconds: 3601}, "spec.deployment.minReadySeconds"},
		{"revisionHistoryLimit over 100", samplev1beta1.DeploymentSpec{Name: "web-e", Image: "nginx:1.29", RevisionHistoryLimit: ptr.To[int32](101)}, "spec.deployment.revisionHistoryLimit"},
		{"revisionHistoryLimit below 0", samplev1beta1.DeploymentSpec{Name: "web-e", Image: "nginx:1.29", RevisionHistoryLimit: ptr.To[int32](-1)}, "spec.deployment.revisionHistoryLimit"},
	} {
		_, err := beta.Create(s.ctx, &samplev1beta1.Foo{ObjectMeta: metav1.ObjectMeta{Name: "e"}, Spec: samplev1beta1.FooSpec{Deployment: tc.d}}, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("v1beta1 Foo with %s: %v, want refused saying %q", tc.name, err, tc.says)
		}
	}

	// Server-side apply from both versions on one object: one set of owners.
	if _, err := beta.Apply(s.ctx, applyv1beta1.Foo("b", s.ns).WithSpec(applyv1beta1.FooSpec().
		WithDeployment(applyv1beta1.DeploymentSpec().WithName("web-b").WithImage("nginx:1.29").WithReplicas(1))),
		metav1.ApplyOptions{FieldManager: "team-beta"}); err != nil {
		t.Fatal(err)
	}
	if _, err := alpha.Apply(s.ctx, applyv1alpha1.Foo("b", s.ns).WithSpec(applyv1alpha1.FooSpec().
		WithDeploymentName("web-b").WithContainerPort(8080)), metav1.ApplyOptions{FieldManager: "team-alpha"}); err != nil {
		t.Fatal(err)
	}
	_, err = alpha.Apply(s.ctx, applyv1alpha1.Foo("b", s.ns).WithSpec(applyv1alpha1.FooSpec().
		WithDeploymentName("web-b").WithReplicas(5)), metav1.ApplyOptions{FieldManager: "team-alpha"})
	if err == nil || !strings.Contains(err.Error(), `conflict with "team-beta"`) {
		t.Fatalf("v1alpha1 apply of replicas owned through v1beta1: %v, want a conflict with team-beta", err)
	}
	if got, err = beta.Get(s.ctx, "b", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if d := got.Spec.Deployment; d.Image != "nginx:1.29" || ptr.Deref(d.ContainerPort, 0) != 8080 || ptr.Deref(d.Replicas, 0) != 1 {
		t.Fatalf("after applies from both versions: spec.deployment %+v", d)
	}

	// The scale subresource and the printer columns, per version.
	scale, err := s.dyn.Resource(schema.GroupVersionResource{Group: "samplecontroller.example.com", Version: "v1beta1", Resource: "foos"}).
		Namespace(s.ns).Get(s.ctx, "a", metav1.GetOptions{}, "scale")
	if err != nil {
		t.Fatal(err)
	}
	if r, _, _ := unstructured.NestedInt64(scale.Object, "spec", "replicas"); r != 3 {
		t.Fatalf("v1beta1 scale: spec.replicas %d, want 3", r)
	}
	// A Foo named without its version is read in the preferred one,
	// v1beta1: Kubernetes orders beta above alpha.
	if out, err := s.kubectl("get", "foo", "a", "-o", "custom-columns=X:.apiVersion", "--no-headers"); err != nil || strings.TrimSpace(out) != "samplecontroller.example.com/v1beta1" {
		t.Fatalf("kubectl get foo, no version named: %q, %v; want v1beta1, the preferred version", out, err)
	}
	for _, version := range []string{"v1alpha1", "v1beta1"} {
		out, err := s.kubectl("get", "foos."+version+".samplecontroller.example.com", "a", "-o", "custom-columns=X:.apiVersion", "--no-headers")
		if err != nil || strings.TrimSpace(out) != "samplecontroller.example.com/"+version {
			t.Fatalf("kubectl get in %s: %q, %v", version, out, err)
		}
		out, err = s.kubectl("get", "foos."+version+".samplecontroller.example.com", "a")
		if err != nil || !strings.Contains(out, "DEPLOYMENT") || !strings.Contains(out, "web-a") {
			t.Fatalf("kubectl get in %s, the printer columns:\n%s (%v)", version, out, err)
		}
	}

	// The webhook down: the stored version still reads and writes; the
	// other fails with the API server's message; nothing is rewritten.
	before, err := beta.Get(s.ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stop()
	_, err = alpha.Get(s.ctx, "a", metav1.GetOptions{})
	if err == nil || !strings.Contains(err.Error(), "conversion webhook") {
		t.Fatalf("v1alpha1 read with the webhook down: %v, want the API server's conversion webhook error", err)
	}
	t.Logf("a v1alpha1 read with the webhook down: %v", err)
	after, err := beta.Get(s.ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("v1beta1 read with the webhook down: %v", err)
	}
	if after.ResourceVersion != before.ResourceVersion {
		t.Fatalf("the stored Foo changed while the webhook was down: resourceVersion %s -> %s", before.ResourceVersion, after.ResourceVersion)
	}
	// The two keepers wrote the Secret once between them.
	if now, err := s.kube.CoreV1().Secrets(s.ns).Get(s.ctx, secret.Name, metav1.GetOptions{}); err != nil || now.ResourceVersion != secret.ResourceVersion {
		t.Fatalf("the Secret was written again (%v)", err)
	}
}

// TestConversionWebhookServedByTheController: the controller binary, given
// -webhook-bind-address, serves the webhook and keeps its certificate
// (issued for 127.0.0.1 and localhost outside a cluster) in the Secret of
// its leader election namespace; with v1beta1 served through it, Foos
// converge as before and read in both versions; signalled to stop, it
// answers for 5 s more; once it has stopped, only the version not stored
// fails.
func TestConversionWebhookServedByTheController(t *testing.T) {
	cl := privateCluster(t, clusterOptions{noConversionWebhook: true})
	s := newScenarioOn(t, cl)
	ctrl := s.startController("-webhook-bind-address=127.0.0.1:0", "-leader-elect-namespace="+s.ns)
	addr := s.webhookAddress(ctrl)
	serveV1beta1(t, s, "https://"+addr+webhook.Path)
	var secret *corev1.Secret
	s.eventually(30*time.Second, "the webhook's Secret", func() (bool, string) {
		var err error
		secret, err = s.kube.CoreV1().Secrets(s.ns).Get(s.ctx, "foo-controller-webhook-cert", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	certs, err := certutil.ParseCertsPEM(secret.Data[webhook.KeyCert])
	if err != nil || len(certs) != 1 || !slices.Equal(certs[0].DNSNames, []string{"localhost"}) || len(certs[0].IPAddresses) != 1 || certs[0].IPAddresses[0].String() != "127.0.0.1" {
		t.Fatalf("the serving certificate: %v, %v", certs, err)
	}

	s.createFoo(newFoo("a", "web-a", 1))
	s.waitConverged("a", time.Minute)
	alpha := s.foos.SamplecontrollerV1alpha1().Foos(s.ns)
	s.eventually(30*time.Second, "the Foo read in v1alpha1", func() (bool, string) {
		got, err := alpha.Get(s.ctx, "a", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return got.Spec.DeploymentName == "web-a", fmt.Sprintf("spec %+v", got.Spec)
	})

	// Signalled, it goes on answering for its linger (5 s: webhook.Start)
	// at least: the reviews the API server still sends it as its Pod
	// leaves the Service's endpoints.
	signalled := time.Now()
	if err := ctrl.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Reads for 3 s of the 5: a read takes a while on a busy machine.
	for time.Since(signalled) < 3*time.Second {
		if _, err := alpha.Get(s.ctx, "a", metav1.GetOptions{}); err != nil {
			t.Fatalf("a v1alpha1 read %v after the signal: %v; the webhook must answer for 5 s", time.Since(signalled).Round(time.Millisecond), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := ctrl.wait(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("the controller exited %v after the signal", time.Since(signalled).Round(time.Millisecond))
	if _, err := alpha.Get(s.ctx, "a", metav1.GetOptions{}); err == nil || !strings.Contains(err.Error(), "conversion webhook") {
		t.Fatalf("v1alpha1 read with the controller stopped: %v", err)
	}
	if _, err := s.getFoo("a"); err != nil {
		t.Fatalf("v1beta1 read with the controller stopped: %v", err)
	}
}

// TestConversionWebhookOutage: what serving two versions costs and what
// the webhook's outage does, on a real API server, with v1beta1 stored.
// While v1alpha1 is served beside it, every write of a Foo, in any
// version, costs a review: the API server decodes each stored Foo into
// every served version as it is written (its watch cache per version),
// whether or not any client reads v1alpha1; lists in v1alpha1 are served
// from that cache with no review; when the API server starts, it fills the
// cache one Foo per review. With the webhook down, reads and writes in
// v1beta1 go on, the controller's and kubectl's default, but for a
// server-side apply to a Foo written through v1alpha1 (its managed fields
// are tracked in v1alpha1); reads in v1alpha1 fail; deleting a namespace
// holding Foos goes (the namespace controller lists them in the preferred
// version, v1beta1, the stored one). Back up at the same address, v1alpha1
// reads see the writes made meanwhile.
func TestConversionWebhookOutage(t *testing.T) {
	cl := privateCluster(t, clusterOptions{noConversionWebhook: true})
	s := newScenarioOn(t, cl)
	doomed := newScenarioOn(t, cl)

	var reviews, objects, largest atomic.Int64
	converter := webhook.NewConverter(fooscheme.Scheme)
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var review struct {
			Request struct {
				Objects []json.RawMessage `json:"objects"`
			} `json:"request"`
		}
		_ = json.Unmarshal(body, &review)
		n := int64(len(review.Request.Objects))
		reviews.Add(1)
		objects.Add(n)
		for m := largest.Load(); n > m && !largest.CompareAndSwap(m, n); m = largest.Load() {
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		converter.ServeHTTP(w, r)
	})
	keeper := &webhook.Keeper{Kube: s.kube, Dynamic: s.dyn, CRD: fooCRD, Hosts: []string{"127.0.0.1"},
		Secret: types.NamespacedName{Namespace: s.ns, Name: "foo-controller-webhook-cert"}}
	serve := func(lis net.Listener) (stop func()) { return runWebhook(t, lis, keeper, counted) }
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	stop := serve(lis)
	t.Cleanup(func() { stop() })
	serveV1beta1(t, s, "https://"+addr+webhook.Path)

	alpha := s.foos.SamplecontrollerV1alpha1().Foos(s.ns)
	beta := s.foos.SamplecontrollerV1beta1().Foos(s.ns)
	s.createFoo(newFoo("a", "web-a", 1))
	doomed.createFoo(newFoo("b", "web-b", 1))
	s.eventually(30*time.Second, "the Foo read in v1alpha1", func() (bool, string) {
		_, err := alpha.Get(s.ctx, "a", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})

	// Writes in v1beta1 only, no client reading v1alpha1: each costs a
	// review all the same.
	const writes = 10
	before := reviews.Load()
	for i := range writes {
		patch := fmt.Sprintf(`{"spec":{"deployment":{"replicas":%d}}}`, i+2)
		if _, err := beta.Patch(s.ctx, "a", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	s.eventually(10*time.Second, "a review per write", func() (bool, string) {
		n := reviews.Load() - before
		return n >= writes, fmt.Sprintf("%d reviews for %d writes", n, writes)
	})
	time.Sleep(time.Second) // the reviews of the last writes
	t.Logf("%d v1beta1 writes, no v1alpha1 client of ours: %d reviews", writes, reviews.Load()-before)

	// Lists in v1alpha1, of Foos stored in v1beta1.
	s.createFoos("many-", 20)
	time.Sleep(time.Second)
	for _, opts := range []metav1.ListOptions{{}, {ResourceVersion: "0"}, {Limit: 5}} {
		r0, o0 := reviews.Load(), objects.Load()
		largest.Store(0)
		list, err := alpha.List(s.ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("a v1alpha1 list (limit %d, resourceVersion %q) of %d Foos: %d reviews, %d objects, at most %d in one", opts.Limit, opts.ResourceVersion, len(list.Items), reviews.Load()-r0, objects.Load()-o0, largest.Load())
		// Served from the API server's v1alpha1 cache, converted as written.
		if n := reviews.Load() - r0; n != 0 {
			t.Errorf("a v1alpha1 list (limit %d, resourceVersion %q) sent %d reviews, want none", opts.Limit, opts.ResourceVersion, n)
		}
	}

	// A Foo written through v1alpha1: its creator's managed fields are
	// recorded in v1alpha1.
	if _, err := alpha.Create(s.ctx, &samplev1alpha1.Foo{ObjectMeta: metav1.ObjectMeta{Name: "old"},
		Spec: samplev1alpha1.FooSpec{DeploymentName: "web-old"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	statusApply := func(name string) error {
		_, err := beta.ApplyStatus(s.ctx, applyv1beta1.Foo(name, s.ns).WithStatus(applyv1beta1.FooStatus().WithReplicas(1)),
			metav1.ApplyOptions{FieldManager: "status-writer", Force: true})
		return err
	}

	// Down.
	stop()
	if _, err := beta.Patch(s.ctx, "a", types.MergePatchType, []byte(`{"spec":{"deployment":{"replicas":42}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("a v1beta1 write with the webhook down: %v", err)
	}
	// Server-side apply tracks each manager's fields in the version it
	// wrote in: applying in v1beta1 to the Foo written through v1alpha1
	// converts it to v1alpha1, and fails with the webhook down (as the
	// controller's status applies would); the Foo written in v1beta1 only
	// takes it.
	if err := statusApply("a"); err != nil {
		t.Fatalf("a v1beta1 status apply, webhook down, to a Foo written in v1beta1 only: %v", err)
	}
	err = statusApply("old")
	if err == nil || !strings.Contains(err.Error(), "conversion webhook") {
		t.Fatalf("a v1beta1 status apply, webhook down, to a Foo written through v1alpha1: %v, want the conversion webhook's error", err)
	}
	t.Logf("a v1beta1 status apply with the webhook down, to a Foo written through v1alpha1: %v", err)
	if _, err := beta.List(s.ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("a v1beta1 list with the webhook down: %v", err)
	}
	_, err = alpha.Get(s.ctx, "a", metav1.GetOptions{})
	if err == nil || !strings.Contains(err.Error(), "conversion webhook") {
		t.Fatalf("v1alpha1 read with the webhook down: %v, want the API server's conversion webhook error", err)
	}
	t.Logf("a v1alpha1 read with the webhook down: %v", err)
	if err := s.kube.CoreV1().Namespaces().Delete(s.ctx, doomed.ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.eventually(2*time.Minute, "the namespace gone, with the webhook down", func() (bool, string) {
		ns, err := s.kube.CoreV1().Namespaces().Get(s.ctx, doomed.ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return false, fmt.Sprintf("phase %s, conditions %+v", ns.Status.Phase, ns.Status.Conditions)
	})

	// Up again, at the same address: nothing was lost.
	if lis, err = net.Listen("tcp", addr); err != nil {
		t.Fatal(err)
	}
	stop = serve(lis)
	s.eventually(30*time.Second, "the write made while down, read in v1alpha1", func() (bool, string) {
		got, err := alpha.Get(s.ctx, "a", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return got.Spec.Replicas != nil && *got.Spec.Replicas == 42, fmt.Sprintf("spec %+v", got.Spec)
	})

	// The API server restarted: its v1alpha1 cache fills again.
	r0, o0 := reviews.Load(), objects.Load()
	largest.Store(0)
	if err := cl.stopAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := cl.startAPIServer(); err != nil {
		t.Fatal(err)
	}
	s.eventually(time.Minute, "a v1alpha1 list after the restart", func() (bool, string) {
		list, err := alpha.List(s.ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 22, fmt.Sprint(err)
	})
	time.Sleep(2 * time.Second)
	t.Logf("the API server restarted with 22 Foos stored: %d reviews, %d objects, at most %d in one", reviews.Load()-r0, objects.Load()-o0, largest.Load())
	// Its cache of v1alpha1 filled one Foo per review.
	if objects.Load()-o0 < 22 || largest.Load() != 1 {
		t.Errorf("the API server's restart: %d objects converted, at most %d in one review; want every Foo, one per review", objects.Load()-o0, largest.Load())
	}
}

// TestUpgradeToV1beta1Storage upgrades, in the order
// artifacts/deploy/README.md gives, from a release whose CRD served and
// stored v1alpha1 alone, holding Foos and the Deployment its controller
// made (owner reference in v1alpha1): the new CRD, then the new
// controller, then the migration. The controller takes its Foo as it is,
// without a write to the Deployment; Foos it never writes (another
// namespace) stay stored in v1alpha1 and read in v1beta1 through the
// webhook; the migration stores every one in v1beta1 and trims
// status.storedVersions to [v1beta1], changing nothing a user wrote.
func TestUpgradeToV1beta1Storage(t *testing.T) {
	cl := privateCluster(t, clusterOptions{noConversionWebhook: true})
	s := newScenarioOn(t, cl)
	ext, err := apiextensions.NewForConfig(cl.admin)
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(s.ctx, fooCRD, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	previousRelease(t, s, ext, "v1alpha1")

	// What the previous release left: a Foo and its Deployment, applied
	// by the controller's field manager with the owner reference it wrote
	// then; and Foos in a namespace no controller under test watches.
	alpha := &samplev1alpha1.Foo{
		ObjectMeta: metav1.ObjectMeta{Name: "a"},
		Spec:       samplev1alpha1.FooSpec{DeploymentName: "web-a", Replicas: ptr.To[int32](2)},
	}
	foo, err := s.foos.SamplecontrollerV1alpha1().Foos(s.ns).Create(s.ctx, alpha, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var hub samplev1beta1.Foo
	if err := fooscheme.Scheme.Convert(foo, &hub, nil); err != nil {
		t.Fatal(err)
	}
	// As the previous release applied it: the owner reference in
	// v1alpha1, and none of the fields it did not declare (v1beta1's
	// own, and what they bring). A field DesiredDeployment declares
	// that the release before did not is cleared here too
	// (docs/adding-a-field.md).
	desired := plan.DesiredDeployment(&hub)
	desired.OwnerReferences[0].APIVersion = ptr.To(samplev1alpha1.GroupVersion.String())
	desired.Spec.MinReadySeconds, desired.Spec.ProgressDeadlineSeconds, desired.Spec.RevisionHistoryLimit = nil, nil, nil
	dep, err := s.kube.AppsV1().Deployments(s.ns).Apply(s.ctx, desired, metav1.ApplyOptions{FieldManager: controllerFieldManager, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	other := newScenarioOn(t, cl)
	const untouched = 5
	for i := range untouched {
		if _, err := other.foos.SamplecontrollerV1alpha1().Foos(other.ns).Create(s.ctx, &samplev1alpha1.Foo{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("b-%d", i)},
			Spec:       samplev1alpha1.FooSpec{DeploymentName: "web"},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// stored counts the Foos of both namespaces in each version, in etcd.
	stored := func() map[string]int {
		t.Helper()
		out := map[string]int{}
		for _, ns := range []string{s.ns, other.ns} {
			inEtcd, err := cl.storedVersionsOf(s.ctx, ns)
			if err != nil {
				t.Fatal(err)
			}
			for v, n := range countVersions(inEtcd) {
				out[v] += n
			}
		}
		return out
	}
	if got := stored(); !maps.Equal(got, map[string]int{"v1alpha1": untouched + 1}) {
		t.Fatalf("before the upgrade: stored %v, want every Foo in v1alpha1", got)
	}
	// countsRead reports, for each version, how many of the Foos nobody
	// wrote read with every status count present (0, here).
	countsRead := func(versions ...string) map[string]int {
		t.Helper()
		out := map[string]int{}
		for _, v := range versions {
			list, err := s.dyn.Resource(schema.GroupVersionResource{Group: samplev1beta1.GroupVersion.Group, Version: v, Resource: "foos"}).
				Namespace(other.ns).List(s.ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, item := range list.Items {
				n := 0
				for _, k := range []string{"replicas", "availableReplicas", "readyReplicas"} {
					if _, found, _ := unstructured.NestedInt64(item.Object, "status", k); found {
						n++
					}
				}
				if n == 3 {
					out[v]++
				}
			}
		}
		return out
	}

	// The new CRD, as shipped (its webhook's Service stood in for by the
	// controller's address, below).
	start := time.Now()
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crd, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(s.ctx, fooCRD, metav1.GetOptions{})
		if err != nil {
			return err
		}
		crd.Spec = shipped.Spec
		_, err = ext.ApiextensionsV1().CustomResourceDefinitions().Update(s.ctx, crd, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	s.eventually(30*time.Second, "v1beta1 served", func() (bool, string) {
		_, err := s.kube.Discovery().ServerResourcesForGroupVersion(samplev1beta1.GroupVersion.String())
		return err == nil, fmt.Sprint(err)
	})
	// The new controller.
	ctrl := s.startController("-webhook-bind-address=127.0.0.1:0", "-leader-elect-namespace="+s.ns)
	serveV1beta1(t, s, "https://"+s.webhookAddress(ctrl)+webhook.Path)
	s.waitConverged("a", 2*time.Minute)
	t.Logf("the Foo converged %v after the new CRD", time.Since(start).Round(time.Millisecond))
	betaBefore, err := other.foos.SamplecontrollerV1beta1().Foos(other.ns).List(s.ctx, metav1.ListOptions{})
	if err != nil || len(betaBefore.Items) != untouched {
		t.Fatalf("the Foos no controller wrote, read in v1beta1: %v", err)
	}
	if got := stored(); got["v1alpha1"] < untouched {
		t.Fatalf("after the new CRD: stored %v, want the %d Foos nobody wrote still in v1alpha1", got, untouched)
	}
	// Their counts read 0 in both versions, though no controller ever
	// wrote them: the CRD defaults them, and the webhook writes out a 0.
	if got, want := countsRead("v1alpha1", "v1beta1"), map[string]int{"v1alpha1": untouched, "v1beta1": untouched}; !maps.Equal(got, want) {
		t.Errorf("after the new CRD, Foos reading their status counts: %v, want %v", got, want)
	}

	// The migration.
	clients := storagemigrate.Clients{Kube: s.kube, APIExtensions: ext, Dynamic: s.dyn}
	res, err := storagemigrate.Migrate(s.ctx, clients, fooCRD, storagemigrate.Options{Settle: 2 * time.Second, PollEvery: 200 * time.Millisecond, ManagedFields: storagemigrate.FooFields})
	if err != nil || res.Method != storagemigrate.Rewrite {
		t.Fatalf("the migration: %+v, %v", res, err)
	}
	// Every Foo was created through v1alpha1: the rewrite moved their
	// managed fields to v1beta1 in the same write.
	if res.FieldsMoved != untouched+1 || res.Written != untouched+1 {
		t.Errorf("the migration wrote %d Foos, moved the managed fields of %d; want all %d, both", res.Written, res.FieldsMoved, untouched+1)
	}
	for _, ns := range []string{s.ns, other.ns} {
		list, err := s.foos.SamplecontrollerV1beta1().Foos(ns).List(s.ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		managedFieldsInV1beta1(t, list.Items)
	}
	if got := stored(); !maps.Equal(got, map[string]int{"v1beta1": untouched + 1}) {
		t.Errorf("after the migration: stored %v, want every Foo in v1beta1", got)
	}
	crd, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(s.ctx, fooCRD, metav1.GetOptions{})
	if err != nil || !slices.Equal(crd.Status.StoredVersions, []string{"v1beta1"}) {
		t.Errorf("storedVersions after the migration: %v, %v; want [v1beta1]", crd.Status.StoredVersions, err)
	}
	betaAfter, err := other.foos.SamplecontrollerV1beta1().Foos(other.ns).List(s.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range betaAfter.Items {
		was, now := betaBefore.Items[i], betaAfter.Items[i]
		if now.Generation != was.Generation || !apiequality.Semantic.DeepEqual(now.Spec, was.Spec) || !maps.Equal(now.Annotations, was.Annotations) {
			t.Errorf("Foo %s changed in the migration: generation %d -> %d, spec %+v -> %+v, annotations %v -> %v",
				now.Name, was.Generation, now.Generation, was.Spec, now.Spec, was.Annotations, now.Annotations)
		}
	}

	// Through all of it, the controller took the Deployment as the
	// previous release left it: no write.
	for _, e := range writesOf(s.controllerRequests(start, time.Now())) {
		if e.ObjectRef.Resource == "deployments" {
			t.Errorf("the controller wrote the Deployment at the upgrade: %s %s", e.Verb, e.ObjectRef.Name)
		}
	}
	after, err := s.kube.AppsV1().Deployments(s.ns).Get(s.ctx, "web-a", metav1.GetOptions{})
	if err != nil || after.Generation != dep.Generation || after.OwnerReferences[0].APIVersion != samplev1alpha1.GroupVersion.String() {
		t.Errorf("the Deployment after the upgrade: %v, %v", after.OwnerReferences, err)
	}
}

// TestKeeperAfterItsWatchesExpired: the certificate keeper is cut off from
// the API server while its Secret is deleted and etcd's history compacted
// past what its informers resume from (410 Gone; the API server without
// its watch cache, so the watch really goes to etcd). Back on the network,
// it lists again, finds the Secret gone, makes a new CA and certificate,
// injects the CA, and v1beta1 reads work again: nothing it watches can be
// missed because a watch expired.
func TestKeeperAfterItsWatchesExpired(t *testing.T) {
	cl := privateCluster(t, clusterOptions{noConversionWebhook: true, apiserverFlags: map[string]string{"watch-cache": "false"}})
	s := newScenarioOn(t, cl)
	proxy := proxyToAPIServer(t, cl, 0)
	cfg := restConfigFor(t, proxy.kubeconfigVia(t, cl.adminKC))
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	secretName := types.NamespacedName{Namespace: s.ns, Name: "foo-controller-webhook-cert"}
	keeper := &webhook.Keeper{Kube: kube, Dynamic: dyn, CRD: fooCRD, Hosts: []string{"127.0.0.1"}, Secret: secretName}
	t.Cleanup(runWebhook(t, lis, keeper, webhook.NewConverter(fooscheme.Scheme)))
	serveV1beta1(t, s, "https://"+lis.Addr().String()+webhook.Path)
	s.createFoo(newFoo("a", "web-a", 1))
	beta := s.foos.SamplecontrollerV1beta1().Foos(s.ns)
	s.eventually(30*time.Second, "the Foo read in v1beta1", func() (bool, string) {
		_, err := beta.Get(s.ctx, "a", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	before, err := s.kube.CoreV1().Secrets(s.ns).Get(s.ctx, secretName.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	proxy.setCut(true)
	if err := s.kube.CoreV1().Secrets(s.ns).Delete(s.ctx, secretName.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("the Secret deleted and etcd compacted at revision %d while the keeper was cut off", s.churnAndCompact(cl))
	proxy.setCut(false)
	restored := time.Now()

	s.eventually(2*time.Minute, "a new Secret, its CA injected, v1beta1 read", func() (bool, string) {
		secret, err := s.kube.CoreV1().Secrets(s.ns).Get(s.ctx, secretName.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if bytes.Equal(secret.Data[webhook.KeyCABundle], before.Data[webhook.KeyCABundle]) {
			return false, "the same CA as before the deletion"
		}
		crd, err := s.dyn.Resource(webhook.CRDs).Get(s.ctx, fooCRD, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		b64, _, _ := unstructured.NestedString(crd.Object, "spec", "conversion", "webhook", "clientConfig", "caBundle")
		if b64 != base64.StdEncoding.EncodeToString(secret.Data[webhook.KeyCABundle]) {
			return false, "the CRD's caBundle is not the new Secret's"
		}
		_, err = beta.Get(s.ctx, "churn-19", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	t.Logf("new certificate made, injected and served %v after the network came back", time.Since(restored).Round(time.Millisecond))
}
