package charttest

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The eleventh red team (issue 17): a garbage ca.crt written into kube-root-ca.crt and made
// immutable, so kube-controller-manager's root-ca-cert-publisher could not put the cluster's CA
// back, under an armed writer. Through the API server with the controller manager running: the
// write is refused, and a delete is admitted and answered by the publisher, whose own create the
// guard lets through.
func TestRedTeamRootCA(t *testing.T) {
	rt := newRedTeam(t)
	ctx := context.Background()
	cms, sts := rt.cs.CoreV1().ConfigMaps(rt.ns), rt.cs.AppsV1().StatefulSets(rt.ns)
	rt.liveLease(t, 0)
	waitFor(t, 30*time.Second, "the armed writer admitted", func(ctx context.Context) (bool, error) {
		_, err := sts.Create(ctx, rt.writer("armed"), metav1.CreateOptions{})
		return err == nil, nil
	})
	var before string
	waitFor(t, 60*time.Second, "the publisher's kube-root-ca.crt", func(ctx context.Context) (bool, error) {
		cm, err := cms.Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		if err == nil {
			before = cm.Data["ca.crt"]
		}
		return err == nil && before != "", nil
	})
	garbage := "-----BEGIN CERTIFICATE-----\nZ2FyYmFnZQ==\n-----END CERTIFICATE-----\n"
	var err error
	waitFor(t, 30*time.Second, "the armed writer in the guard's watch", func(ctx context.Context) (bool, error) {
		cm, err2 := cms.Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		if err2 != nil {
			return false, nil
		}
		cm.Data["ca.crt"], cm.Immutable = garbage, ptr.To(true)
		_, err = cms.Update(ctx, cm, dryUpdate)
		return err != nil, nil
	})
	for _, want := range []string{"denied the request", "refusing this write of ConfigMap", "root-ca-cert-publisher", "StatefulSet " + rt.ns + "/armed"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("a garbage ca.crt, made immutable, under an armed writer: %v; want the guard's refusal saying %q", err, want)
		}
	}

	// Red team Q of stop 34: the same write in the publisher's name was admitted, and the
	// publisher's every later sync failed on the immutable field. The publisher never sets it.
	asPublisher := impersonating(t, rt.testRelease, "system:serviceaccount:kube-system:root-ca-cert-publisher").CoreV1().ConfigMaps(rt.ns)
	cm, err := cms.Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["ca.crt"], cm.Immutable = garbage, ptr.To(true)
	_, err = asPublisher.Update(ctx, cm, dryUpdate)
	if err == nil || !strings.Contains(err.Error(), "makes it immutable, which its publisher never does") {
		t.Errorf("a garbage ca.crt made immutable in the publisher's name: %v; want the guard's refusal", err)
	}
	cm.Immutable = nil
	if _, err := asPublisher.Update(ctx, cm, dryUpdate); err != nil {
		t.Errorf("the publisher's own write of the CA: %v; want it admitted", err)
	}

	if err := cms.Delete(ctx, "kube-root-ca.crt", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting kube-root-ca.crt: %v; want it admitted (the publisher writes it again)", err)
	}
	waitFor(t, 60*time.Second, "the publisher to write kube-root-ca.crt again through the guard", func(ctx context.Context) (bool, error) {
		cm, err := cms.Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err == nil && cm.Data["ca.crt"] == before, nil
	})
}
