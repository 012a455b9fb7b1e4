//go:build integration

package integration

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// checkMetricsNeedATokenAndTheRight: a controller serving its metrics as
// deployed (-metrics-secure, the default) on metricsAddr answers, over
// HTTPS, 401 to a request with no token or a token the API server does
// not accept, 403 to a ServiceAccount's token without the right to get
// /metrics, and 200 with the metrics once that ServiceAccount is bound to
// the shipped ClusterRole foo-controller-metrics-reader; its probes on
// probesAddr stay plain HTTP with no token, as the kubelet needs them.
func checkMetricsNeedATokenAndTheRight(t *testing.T, s *scenario, metricsAddr, probesAddr string) {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // as Prometheus scrapes it: the token's answer is the check
	get := func(token string) (int, string) {
		req, err := http.NewRequestWithContext(s.ctx, http.MethodGet, "https://"+metricsAddr+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var code int
	s.eventually(30*time.Second, "the metrics served over HTTPS", func() (bool, string) {
		code, _ = get("")
		return code != 0, fmt.Sprint(code)
	})
	if code != http.StatusUnauthorized {
		t.Errorf("/metrics without a token: %d, want 401", code)
	}
	if code, _ := get("not-a-token"); code != http.StatusUnauthorized {
		t.Errorf("/metrics with a token the API server refuses: %d, want 401", code)
	}

	const scraper = "scraper"
	if _, err := s.kube.CoreV1().ServiceAccounts(s.ns).Create(s.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: scraper}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := s.kube.CoreV1().ServiceAccounts(s.ns).CreateToken(s.ctx, scraper, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token := tr.Status.Token
	if code, body := get(token); code != http.StatusForbidden {
		t.Errorf("/metrics with a ServiceAccount's token, no RBAC: %d %.200s, want 403", code, body)
	}

	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "foo-metrics-" + s.ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "foo-controller-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: scraper, Namespace: s.ns}},
	}
	if _, err := env.kube.RbacV1().ClusterRoleBindings().Create(s.ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.kube.RbacV1().ClusterRoleBindings().Delete(t.Context(), binding.Name, metav1.DeleteOptions{})
	})
	// A deny is cached for 10 s.
	s.eventually(30*time.Second, "/metrics for the bound scraper", func() (bool, string) {
		code, body := get(token)
		return code == http.StatusOK && strings.Contains(body, "foo_controller_"), fmt.Sprintf("%d %.200s", code, body)
	})
	if code, _ := httpGet("http://" + probesAddr + "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz without a token: %d, want 200", code)
	}
}
