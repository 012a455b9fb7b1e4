package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"example.com/foo-controller/pkg/corrections"
	"example.com/foo-controller/pkg/metrics"
)

// CRDs is the resource of CustomResourceDefinitions, read and patched
// through the dynamic client: the keeper touches one field of one CRD, not
// worth a clientset of its own.
var CRDs = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// Keeper keeps the webhook's certificate: it brings the Secret to what
// rotate says, injects the Secret's CA bundle into the CRD's conversion
// webhook, and hands the Secret's serving certificate to TLS handshakes
// (GetCertificate). It is the controller pattern once more, on one key: two
// informers, each on one object, feed a workqueue whose worker runs sync.
//
// Every replica runs one, leader or not: while a CRD serves two versions,
// the API server needs the webhook for every Foo written and to fill its
// cache of the version not stored, whichever replica leads. They write
// the same Secret under its resourceVersion, so one wins and the others
// re-read.
type Keeper struct {
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
	// Secret is where the CA and the serving certificate are kept.
	Secret types.NamespacedName
	// CRD is the name of the CustomResourceDefinition whose conversion
	// webhook this serves; its caBundle is kept equal to the Secret's.
	CRD string
	// Hosts are the names (or IP addresses) the API server reaches the
	// webhook at: the Service's DNS name in a cluster, 127.0.0.1 locally.
	Hosts []string
	// Every is how often the certificate is looked at without a change of
	// the Secret or the CRD, for its age (default an hour).
	Every time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time

	cert atomic.Pointer[served]
	// writes are this keeper's recent writes (mayWrite); warnedHost the
	// CRD's webhook host last warned about (warnHost).
	writes     corrections.Fight
	warnedHost string
}

// CABundleFromAnnotation names, on the CRD, the Secret ("namespace/name")
// whose CA its caBundle holds. The keepers of that Secret keep the
// caBundle; a keeper of another Secret (a second installation, or a `make
// run` against a cluster that has one) leaves it alone and says so,
// where the two would otherwise replace each other's CA without end, and
// the API server would trust either webhook only half the time.
const CABundleFromAnnotation = "samplecontroller.example.com/ca-bundle-from"

// Bounds on this keeper's writes: more than writeBurst writes of the
// Secret or the caBundle within about writeWindow means a fight nothing
// here foresaw; it holds off, with an error, instead of writing without
// end. The limiter is the one that bounds the controller's corrections of
// a Deployment (pkg/corrections): writeBurst at once, then one per
// writeWindow/writeBurst.
const (
	writeBurst  = 10
	writeWindow = 5 * time.Minute
)

var writeLimit = corrections.New(writeWindow/writeBurst, writeBurst)

// served is the certificate handshakes get, with the PEM it was read from.
type served struct {
	certPEM, keyPEM []byte
	pair            tls.Certificate
}

const key = "certificate"

// GetCertificate is for tls.Config: the serving certificate last read
// from the Secret, or an error before there is one (the handshake fails,
// and the API server reports the webhook unreachable).
func (k *Keeper) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := k.cert.Load(); c != nil {
		return &c.pair, nil
	}
	return nil, errors.New("no serving certificate yet")
}

// Ready reports whether the keeper has a certificate to serve: a replica
// without one answers no review (the API server fails every request that
// needs it), so it should not count as ready while a rollout replaces the
// replicas that do.
func (k *Keeper) Ready() error {
	if k.cert.Load() == nil {
		return errors.New("no serving certificate yet (the log says why: \"Keeping the webhook certificate failed\")")
	}
	return nil
}

// Run keeps the certificate until ctx ends.
func (k *Keeper) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("secret", k.Secret, "crd", k.CRD)
	if k.Every <= 0 {
		k.Every = time.Hour
	}
	if k.Now == nil {
		k.Now = time.Now
	}
	// Each informer watches one object, by name.
	secrets := cache.NewSharedIndexInformer(cache.NewListWatchFromClient(k.Kube.CoreV1().RESTClient(), "secrets", k.Secret.Namespace,
		fields.OneTermEqualSelector("metadata.name", k.Secret.Name)), &corev1.Secret{}, 0, cache.Indexers{})
	crds := dynamicinformer.NewFilteredDynamicInformer(k.Dynamic, CRDs, metav1.NamespaceAll, 0, cache.Indexers{}, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", k.CRD).String()
	}).Informer()

	queue := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Second, 5*time.Minute),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "webhook-certificate"})
	defer queue.ShutDown()
	enqueue := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { queue.Add(key) },
		UpdateFunc: func(any, any) { queue.Add(key) },
		DeleteFunc: func(any) { queue.Add(key) },
	}
	for _, inf := range []cache.SharedIndexInformer{secrets, crds} {
		if _, err := inf.AddEventHandler(enqueue); err != nil {
			return err
		}
		go inf.RunWithContext(ctx)
	}
	if !cache.WaitForCacheSync(ctx.Done(), secrets.HasSynced, crds.HasSynced) {
		return nil // stopped before the caches synced: a stop, not a failure
	}
	queue.Add(key)
	go func() {
		<-ctx.Done()
		queue.ShutDown()
	}()
	for {
		item, shutdown := queue.Get()
		if shutdown {
			return nil
		}
		err := k.sync(klog.NewContext(ctx, logger), secrets.GetStore(), crds.GetStore())
		switch {
		case apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err):
			// The Secret or the CRD changed since the cache saw it: another
			// replica wrote it (its certificate is as good as ours), or this
			// keeper did and the cache has not caught up (its Secret write
			// is followed by a CRD patch under the older CRD). Look again
			// once the change arrives. Routine: not at -v=2 either (make
			// run's), where its "object has been modified" reads as a failure.
			logger.V(4).Info("The webhook's Secret or CRD changed while being written; looking again", "err", err.Error())
			queue.AddRateLimited(item)
		case err != nil:
			logger.Error(err, "Keeping the webhook certificate failed; retrying")
			queue.AddRateLimited(item)
		default:
			queue.Forget(item)
			queue.AddAfter(item, k.Every)
		}
		queue.Done(item)
	}
}

// sync brings the Secret and the CRD's caBundle to what they should be,
// and serves the Secret's certificate. It writes nothing when both are
// right.
func (k *Keeper) sync(ctx context.Context, secrets, crds cache.Store) error {
	logger := klog.FromContext(ctx)
	var secret *corev1.Secret
	if obj, ok, err := secrets.GetByKey(k.Secret.String()); err != nil {
		return err
	} else if ok {
		secret = obj.(*corev1.Secret)
	}
	var crd *unstructured.Unstructured
	if obj, ok, err := crds.GetByKey(k.CRD); err != nil {
		return err
	} else if ok {
		crd = obj.(*unstructured.Unstructured)
	}
	injected, webhook := caBundleOf(crd)

	var data map[string][]byte
	if secret != nil {
		data = secret.Data
	}
	next, why, err := rotate(data, injected, k.Hosts, k.Now())
	if err != nil {
		return err
	}
	if why != "" {
		if err := k.mayWrite("the Secret"); err != nil {
			if secret == nil || k.cert.Load() == nil {
				err = fmt.Errorf("%w; this replica has no serving certificate meanwhile", err)
			}
			return err
		}
		if err := k.writeSecret(ctx, secret, next); err != nil {
			return err
		}
		logger.Info("Webhook certificate updated", "why", why, "hosts", k.Hosts)
		data = next
	}
	if err := k.serve(data); err != nil {
		return err
	}
	if !webhook {
		return nil
	}
	_ = k.warnHost(logger, crd)
	from := crd.GetAnnotations()[CABundleFromAnnotation]
	if from != "" && from != k.Secret.String() {
		return fmt.Errorf("the CRD's caBundle holds the CA of Secret %s, not of this replica's %s (another installation of the controller, "+
			"or this one's Secret renamed or moved): the API server does not trust this replica's webhook; to hand the caBundle over: "+
			"kubectl annotate crd %s %s-", from, k.Secret, k.CRD, CABundleFromAnnotation)
	}
	if from == k.Secret.String() && bytes.Equal(injected, data[KeyCABundle]) {
		return nil
	}
	if err := k.mayWrite("the CRD's caBundle"); err != nil {
		return err
	}
	// Under the CRD's resourceVersion: two keepers that both saw no owner
	// cannot both claim it; the later one gets a conflict and looks again.
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": crd.GetResourceVersion(),
			"annotations": map[string]string{CABundleFromAnnotation: k.Secret.String()}},
		"spec": map[string]any{"conversion": map[string]any{"webhook": map[string]any{"clientConfig": map[string]any{
			"caBundle": base64.StdEncoding.EncodeToString(data[KeyCABundle])}}}},
	})
	if err != nil {
		return err
	}
	if _, err := k.Dynamic.Resource(CRDs).Patch(ctx, k.CRD, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("injecting the CA bundle into CRD %s: %w", k.CRD, err)
	}
	logger.Info("CA bundle injected into the CRD's conversion webhook")
	return nil
}

// mayWrite records an attempt to write what, or refuses it when this
// keeper has used up writeLimit's burst.
func (k *Keeper) mayWrite(what string) error {
	now := k.Now()
	if writeLimit.Reserve(&k.writes, 0, now).Wait > 0 {
		return fmt.Errorf("holding off writing %s: %d attempts to write the webhook certificate or the caBundle at once, then one per %v, are used up; "+
			"something else keeps changing them back: a GitOps tool or Helm re-applying the CRD with its own caBundle, a CA injector, or another tool writing the Secret %s",
			what, writeBurst, writeWindow/writeBurst, k.Secret)
	}
	writeLimit.Made(&k.writes, 0, now)
	return nil
}

// warnHost warns, once each time it changes, when the CRD sends reviews
// to a host the served certificate is not issued for: every handshake would fail with a
// certificate error that the API server reports, not this process. It
// returns the host it warned about, if it did.
func (k *Keeper) warnHost(logger klog.Logger, crd *unstructured.Unstructured) string {
	host := ""
	if u, _, _ := unstructured.NestedString(crd.Object, "spec", "conversion", "webhook", "clientConfig", "url"); u != "" {
		if parsed, err := url.Parse(u); err == nil {
			host = parsed.Hostname()
		}
	} else {
		name, _, _ := unstructured.NestedString(crd.Object, "spec", "conversion", "webhook", "clientConfig", "service", "name")
		ns, _, _ := unstructured.NestedString(crd.Object, "spec", "conversion", "webhook", "clientConfig", "service", "namespace")
		if name != "" {
			host = name + "." + ns + ".svc"
		}
	}
	has := canonical(k.Hosts)
	if c := k.cert.Load(); c != nil && c.pair.Leaf != nil {
		has = certHosts(c.pair.Leaf) // what is served, other replicas' hosts included
	}
	if host == "" || host == k.warnedHost || slices.Contains(has, canonical([]string{host})[0]) {
		return ""
	}
	k.warnedHost = host
	logger.Info("Warning: the CRD sends conversion reviews to a host the webhook's certificate is not issued for; set -webhook-hosts",
		"crdHost", host, "hosts", k.Hosts)
	return host
}

// caBundleOf is the CRD's conversion caBundle, decoded, and whether the
// CRD converts through a webhook at all (without one there is nothing to
// inject: the CRD's manifest declares the webhook, the keeper only keeps
// its trust).
func caBundleOf(crd *unstructured.Unstructured) ([]byte, bool) {
	if crd == nil {
		return nil, false
	}
	if s, _, _ := unstructured.NestedString(crd.Object, "spec", "conversion", "strategy"); s != "Webhook" {
		return nil, false
	}
	b64, _, _ := unstructured.NestedString(crd.Object, "spec", "conversion", "webhook", "clientConfig", "caBundle")
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, true
	}
	return b, true
}

func (k *Keeper) writeSecret(ctx context.Context, secret *corev1.Secret, data map[string][]byte) error {
	secrets := k.Kube.CoreV1().Secrets(k.Secret.Namespace)
	if secret == nil {
		_, err := secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: k.Secret.Name, Namespace: k.Secret.Namespace,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "foo-controller"}},
			Type: corev1.SecretTypeTLS,
			Data: data,
		}, metav1.CreateOptions{})
		return err
	}
	updated := secret.DeepCopy() // the cache's copy is never changed
	updated.Data = data
	_, err := secrets.Update(ctx, updated, metav1.UpdateOptions{})
	return err
}

// serve makes data's serving certificate the one handshakes get.
func (k *Keeper) serve(data map[string][]byte) error {
	if c := k.cert.Load(); c != nil && bytes.Equal(c.certPEM, data[KeyCert]) && bytes.Equal(c.keyPEM, data[KeyKey]) {
		return nil
	}
	pair, err := tls.X509KeyPair(data[KeyCert], data[KeyKey])
	if err != nil {
		return fmt.Errorf("the Secret's serving certificate: %w", err)
	}
	k.cert.Store(&served{certPEM: data[KeyCert], keyPEM: data[KeyKey], pair: pair})
	metrics.WebhookCertificateExpiry.Set(float64(pair.Leaf.NotAfter.Unix()))
	return nil
}
