package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/noetl/ehdb-election/internal/testcluster"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// TestCertRotationWithLeastPrivilege runs the webhook as a ServiceAccount holding exactly the
// RBAC the contract gives it (its Secret and webhook configuration only by resourceNames), with
// --cert-rotation and an empty Secret as the chart creates it. The kubelet's projection of the
// Secret into --cert-dir is emulated. It shows: /readyz is false until the certificate is
// served; the rotator fills the Secret and patches the caBundle (so its caches list and watch by
// name, or RBAC would have stopped them); the served certificate chains to that CA for
// <service>.<namespace>.svc; and the API server, trusting only the patched caBundle, gets the
// guard's answers.
func TestCertRotationWithLeastPrivilege(t *testing.T) {
	c := testcluster.ForTest(t)
	cs := c.Clientset()
	ns := c.NewNamespace(t)
	ctx := context.Background()
	const secretName, serviceName = "ehdb-election-webhook-tls", "ehdb-election-webhook"
	vwcName := "ehdb-election-rot-" + ns
	port := freePort(t)

	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secretName}, Type: corev1.SecretTypeOpaque}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The webhook configuration without a caBundle, failing open until the CA is in.
	registerGuard(t, cs, vwcName, fmt.Sprintf("https://localhost:%d/validate", port), nil, ns)
	setFailurePolicy(t, cs, vwcName, admissionregistrationv1.Ignore)
	kubeconfig := webhookIdentity(t, c, ns, secretName, vwcName)

	dir := t.TempDir()
	probes, _ := startWebhook(t, []string{
		"--kubeconfig=" + kubeconfig, "--cert-rotation=true", "--cert-dir=" + dir, "--namespace=" + ns,
		"--cert-secret-name=" + secretName, "--service-name=" + serviceName, "--webhook-config-name=" + vwcName,
		"--webhook-host=127.0.0.1", "--webhook-port=" + strconv.Itoa(port),
	}, func(o *options) { o.extraDNSNames = []string{"localhost"} })

	// Not ready while nothing is mounted.
	eventually(t, 30*time.Second, "the probe endpoint", func() error {
		if code, _ := get(probes + "/healthz"); code != 200 {
			return errNotYet
		}
		return nil
	})
	if code, body := get(probes + "/readyz"); code == 200 {
		t.Fatalf("/readyz is ready before any certificate: %s", body)
	}

	// The rotator fills the Secret.
	var secret *corev1.Secret
	eventually(t, 60*time.Second, "the Secret filled", func() error {
		s, err := cs.CoreV1().Secrets(ns).Get(ctx, secretName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, k := range []string{"ca.crt", "tls.crt", "tls.key"} {
			if len(s.Data[k]) == 0 {
				return fmt.Errorf("no %s yet", k)
			}
		}
		secret = s
		return nil
	})
	// The kubelet projects it into the mounted directory.
	for _, k := range []string{"ca.crt", "tls.crt", "tls.key"} {
		write(t, filepath.Join(dir, k), secret.Data[k])
	}
	waitReady(t, 60*time.Second, probes)
	vwc, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, vwcName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range vwc.Webhooks {
		if !bytes.Equal(w.ClientConfig.CABundle, secret.Data["ca.crt"]) {
			t.Fatalf("webhook %s: caBundle not the rotated CA", w.Name)
		}
	}

	// The served certificate verifies against the CA for the Service's name.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(secret.Data["ca.crt"])
	conn, err := tls.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port), &tls.Config{RootCAs: pool, ServerName: serviceName + "." + ns + ".svc", MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("TLS with the rotated CA: %v", err)
	}
	_ = conn.Close()
	// TLS below 1.2 is refused.
	if conn, err := tls.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port), &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS11}); err == nil { //nolint:gosec // the point is to try
		_ = conn.Close()
		t.Fatal("a TLS 1.1 handshake succeeded")
	}

	// The API server, trusting only the patched caBundle, reaches the guard; fail closed now.
	setFailurePolicy(t, cs, vwcName, admissionregistrationv1.Fail)
	eventually(t, 30*time.Second, "a refusal through the API server", func() error {
		_, err := cs.AppsV1().StatefulSets(ns).Create(ctx, wt.ReferenceWriter(ns, wt.Armed()), dryRun)
		switch {
		case err == nil:
			return errNotYet
		case !strings.Contains(err.Error(), "refusing to arm"):
			return err
		}
		return nil
	})
	if _, err := cs.AppsV1().StatefulSets(ns).Create(ctx, wt.ReferenceWriter(ns), dryRun); err != nil {
		t.Fatalf("unarmed writer through the rotated TLS: %v", err)
	}

	// A second start with the Secret already filled keeps the CA (what `helm upgrade` relies on).
	before := secret.Data["ca.crt"]
	after, err := cs.CoreV1().Secrets(ns).Get(ctx, secretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after.Data["ca.crt"]) {
		t.Fatal("the CA changed while the webhook ran")
	}
}

func setFailurePolicy(t *testing.T, cs kubernetes.Interface, name string, p admissionregistrationv1.FailurePolicyType) {
	t.Helper()
	ctx := context.Background()
	eventually(t, 10*time.Second, "failure policy "+string(p), func() error {
		vwc, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i := range vwc.Webhooks {
			vwc.Webhooks[i].FailurePolicy = &p
		}
		_, err = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, vwc, metav1.UpdateOptions{})
		return err // a conflict with the rotator's patch is retried
	})
}

// webhookIdentity creates the webhook's ServiceAccount with exactly the contract's RBAC and
// returns a kubeconfig that authenticates as it.
func webhookIdentity(t *testing.T, c *testcluster.Cluster, ns, secretName, vwcName string) string {
	t.Helper()
	cs := c.Clientset()
	ctx := context.Background()
	const sa = "ehdb-election-webhook"
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}
	tls := []string{"get", "list", "watch", "update", "patch"}
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "ehdb-webhook-" + ns}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingwebhookconfigurations"}, ResourceNames: []string{vwcName}, Verbs: tls},
		{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterroles", "clusterrolebindings"}, Verbs: []string{"get", "list", "watch"}},
	}}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, cr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: cr.Name}, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: cr.Name}}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{})
		_ = cs.RbacV1().ClusterRoles().Delete(context.Background(), cr.Name, metav1.DeleteOptions{})
	})
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "ehdb-webhook-tls", Namespace: ns}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{secretName}, Verbs: tls},
		// The guard's reads, only in the namespace it guards (as the chart's per-namespace Role).
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"roles", "rolebindings"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"replicationcontrollers", "pods"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"apps"}, Resources: []string{"statefulsets", "deployments", "daemonsets", "replicasets"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"batch"}, Resources: []string{"cronjobs", "jobs"}, Verbs: []string{"get", "list", "watch"}},
	}}
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name, Namespace: ns}, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name}}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "webhook.kubeconfig")
	if err := c.ServiceAccountKubeconfig(ctx, ns, sa, path); err != nil {
		t.Fatal(err)
	}
	// Sanity: the identity really is restricted (an unselected list is forbidden).
	cfg, err := c.ServiceAccountConfig(ctx, ns, sa)
	if err != nil {
		t.Fatal(err)
	}
	restricted, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := restricted.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); err == nil {
		t.Fatal("the webhook identity may list every Secret; the test would prove nothing")
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	return path
}
