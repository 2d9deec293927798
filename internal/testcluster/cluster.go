// Package testcluster gives tests a real Kubernetes API server: by default a local control plane
// (etcd, kube-apiserver, kube-controller-manager) built from the Kubernetes Go modules and started
// on loopback with RBAC, ServiceAccount tokens and admission enabled; or, when E2E_KUBECONFIG
// names one, an existing cluster such as kind. Tests see the same API either way, so the suite
// that runs here is the suite a user runs against their cluster.
//
// There is no kubelet: Pods are admitted and stay Pending. That is enough for admission and RBAC,
// which is what this project's integration tests exercise.
package testcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/internal/childproc"
)

// Cluster is a running API server and how to reach it.
type Cluster struct {
	// Config authenticates as a cluster administrator (system:masters).
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file holding Config, for processes the test starts.
	Kubeconfig string

	local     bool
	dir       string
	pki       *pki
	clientset kubernetes.Interface
	etcd      *childproc.Process
	apiserver *childproc.Process
	kcm       *childproc.Process
}

// Options tune a local control plane.
type Options struct {
	// ExtraAPIServerFlags are appended to kube-apiserver's command line (later flags win).
	ExtraAPIServerFlags []string
	// Node prepares the control plane for a real node (hack/localnode): without it there is no
	// kubelet and everything stays on loopback.
	Node *NodeOptions
}

// NodeOptions describe the one node a kubelet will register. The API server then binds and
// advertises the node's address (it refuses loopback as advertise address), so the kubernetes
// Service's endpoint is reachable from Pods through kube-proxy; it authorizes kubelets with the
// Node authorizer and NodeRestriction, and calls them (logs, exec) with a client certificate.
type NodeOptions struct {
	// Address is the node's address, on an interface the caller created: the API server's bind
	// and advertise address, and the address every kubeconfig of this cluster names.
	Address net.IP
}

// ServiceCIDR is the local cluster's Service range. Nothing routes to it: there are no nodes.
const ServiceCIDR = "10.96.0.0/16"

// Start brings up a cluster: the one named by E2E_KUBECONFIG if set, else a local control plane.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if path := os.Getenv("E2E_KUBECONFIG"); path != "" {
		return external(path)
	}
	bins, err := binDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "ehdb-testcluster-")
	if err != nil {
		return nil, fmt.Errorf("creating cluster folder: %w", err)
	}
	if opts.Node != nil && (opts.Node.Address == nil || opts.Node.Address.IsLoopback() || opts.Node.Address.IsUnspecified()) {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("node address %v: want a routable address on an interface of this machine (the API server refuses loopback)", opts.Node.Address)
	}
	c := &Cluster{local: true, dir: dir}
	if err := c.startLocal(ctx, bins, opts); err != nil {
		stopErr := c.Stop()
		return nil, errors.Join(err, stopErr)
	}
	return c, nil
}

func external(path string) (*Cluster, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("loading E2E_KUBECONFIG %s: %w", path, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Cluster{Config: cfg, Kubeconfig: path, clientset: cs}, nil
}

func (c *Cluster) startLocal(ctx context.Context, bins string, opts Options) error {
	p, err := newPKI(c.dir)
	if err != nil {
		return err
	}
	c.pki = p
	bind := "127.0.0.1"
	serving := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1"), net.ParseIP("10.96.0.1")}
	if opts.Node != nil {
		bind = opts.Node.Address.String()
		serving = append(serving, opts.Node.Address)
	}
	if _, err := p.issue("apiserver", "kube-apiserver", nil, serving,
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}, true); err != nil {
		return err
	}
	admin, err := p.issue("admin", "ehdb-test-admin", []string{"system:masters"}, nil, nil, false)
	if err != nil {
		return err
	}
	kcmCert, err := p.issue("kcm", "system:kube-controller-manager", nil, nil, nil, false)
	if err != nil {
		return err
	}
	if err := p.serviceAccountKeys(); err != nil {
		return err
	}
	ports, err := childproc.FreePorts(4)
	if err != nil {
		return err
	}
	etcdClient, etcdPeer, apiPort, kcmPort := ports[0], ports[1], ports[2], ports[3]
	host := "https://" + net.JoinHostPort(bind, strconv.Itoa(apiPort))

	c.Config = &rest.Config{
		Host:            host,
		TLSClientConfig: rest.TLSClientConfig{CAData: p.caPEM, CertData: admin.certPEM, KeyData: admin.keyPEM},
		QPS:             200,
		Burst:           400,
	}
	if c.clientset, err = kubernetes.NewForConfig(c.Config); err != nil {
		return err
	}
	c.Kubeconfig = filepath.Join(c.dir, "admin.kubeconfig")
	if err := writeKubeconfig(c.Kubeconfig, host, p.caPEM, &clientcmdapi.AuthInfo{ClientCertificateData: admin.certPEM, ClientKeyData: admin.keyPEM}); err != nil {
		return err
	}
	kcmKubeconfig := filepath.Join(c.dir, "kcm.kubeconfig")
	if err := writeKubeconfig(kcmKubeconfig, host, p.caPEM, &clientcmdapi.AuthInfo{ClientCertificateData: kcmCert.certPEM, ClientKeyData: kcmCert.keyPEM}); err != nil {
		return err
	}

	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdClient)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(etcdPeer)
	c.etcd = &childproc.Process{Name: "etcd", Bin: filepath.Join(bins, "etcd"), LogPath: filepath.Join(c.dir, "etcd.log"), Args: []string{
		"--name=default",
		"--data-dir=" + filepath.Join(c.dir, "etcd"),
		"--listen-client-urls=" + etcdURL, "--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=default=" + peerURL,
		// A test cluster's data is thrown away; fsync only costs time on a shared 2-core machine.
		"--unsafe-no-fsync",
		"--log-level=warn",
	}}
	// The kubernetes Service's endpoints would name this machine's address; without a node nothing
	// consumes them, and writing none keeps every address the cluster knows on loopback. With a
	// node they name the node's address, which Pods reach through kube-proxy.
	authz, reconciler := "RBAC", "none"
	admission := "NamespaceLifecycle,LimitRanger,ServiceAccount,PodSecurity,DefaultStorageClass,ResourceQuota,MutatingAdmissionWebhook,ValidatingAdmissionPolicy,ValidatingAdmissionWebhook"
	var nodeFlags []string
	if opts.Node != nil {
		authz, reconciler, admission = "Node,RBAC", "lease", admission+",NodeRestriction"
		if _, err := p.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, nil, nil, false); err != nil {
			return err
		}
		nodeFlags = []string{
			"--kubelet-client-certificate=" + p.path("apiserver-kubelet-client.crt"),
			"--kubelet-client-key=" + p.path("apiserver-kubelet-client.key"),
			"--kubelet-preferred-address-types=InternalIP",
		}
	}
	c.apiserver = &childproc.Process{Name: "kube-apiserver", Bin: filepath.Join(bins, "kube-apiserver"), LogPath: filepath.Join(c.dir, "kube-apiserver.log"), Args: append([]string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=" + bind,
		"--advertise-address=" + bind,
		"--secure-port=" + strconv.Itoa(apiPort),
		"--cert-dir=" + filepath.Join(c.dir, "apiserver-certs"),
		"--tls-cert-file=" + p.path("apiserver.crt"),
		"--tls-private-key-file=" + p.path("apiserver.key"),
		"--client-ca-file=" + p.path("ca.crt"),
		"--authorization-mode=" + authz,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.path("sa.pub"),
		"--service-account-signing-key-file=" + p.path("sa.key"),
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--endpoint-reconciler-type=" + reconciler,
		// Reach a Service-backed webhook (or aggregated API) through its endpoints, never its
		// ClusterIP: nothing here routes the Service range, so a ClusterIP dial would follow the
		// host's default route off the machine. With no kubelet there are no endpoints, and such a
		// call fails at once with "no endpoints available" instead of sending a packet.
		"--enable-aggregator-routing=true",
		"--enable-admission-plugins=" + admission,
		"--allow-privileged=true",
		"--profiling=false",
		"--v=1",
	}, append(nodeFlags, opts.ExtraAPIServerFlags...)...)}
	c.kcm = &childproc.Process{Name: "kube-controller-manager", Bin: filepath.Join(bins, "kube-controller-manager"), LogPath: filepath.Join(c.dir, "kube-controller-manager.log"), Args: []string{
		"--kubeconfig=" + kcmKubeconfig,
		"--authentication-kubeconfig=" + kcmKubeconfig,
		"--authorization-kubeconfig=" + kcmKubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(kcmPort),
		"--cert-dir=" + filepath.Join(c.dir, "kcm-certs"),
		"--leader-elect=false",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + p.path("sa.key"),
		"--root-ca-file=" + p.path("ca.crt"),
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--profiling=false",
		"--v=1",
	}}

	if err := c.etcd.Start(); err != nil {
		return err
	}
	if err := c.StartAPIServer(ctx); err != nil {
		return err
	}
	return c.startControllerManager(ctx)
}

// startControllerManager starts kube-controller-manager and waits until it writes. Its port was
// free when picked, seconds before: the API server's and etcd's connections (and other clusters'
// on this machine) draw from the same ephemeral range, and a fresh-clone CI once lost the race
// ("bind: address already in use"). Nothing else uses that port, so it is picked again and the
// start retried.
func (c *Cluster) startControllerManager(ctx context.Context) error {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if attempt > 0 {
			ports, perr := childproc.FreePorts(1)
			if perr != nil {
				return perr
			}
			for i, a := range c.kcm.Args {
				if strings.HasPrefix(a, "--secure-port=") {
					c.kcm.Args[i] = "--secure-port=" + strconv.Itoa(ports[0])
				}
			}
		}
		if err = c.kcm.Start(); err != nil {
			return err
		}
		// The default ServiceAccount appearing proves the controller-manager runs and can write:
		// Pods need it to pass ServiceAccount admission.
		err = c.waitFor(ctx, c.kcm, 60*time.Second, func(ctx context.Context) (bool, error) {
			_, err := c.clientset.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
			return err == nil, nil
		})
		if err == nil || !c.kcm.Exited() || !strings.Contains(c.kcm.LogTail(5), "address already in use") {
			return err
		}
	}
	return err
}

// StartAPIServer (re)starts kube-apiserver on its port and waits until it is ready. Tests use it
// with StopAPIServer to take the API away from running writers and give it back.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	if !c.local {
		return errors.New("starting the API server is only possible on the local control plane")
	}
	if !c.apiserver.Exited() {
		return nil
	}
	if err := c.apiserver.Start(); err != nil {
		return err
	}
	return c.waitFor(ctx, c.apiserver, 90*time.Second, func(ctx context.Context) (bool, error) {
		body, err := c.clientset.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok", nil
	})
}

// StopAPIServer stops kube-apiserver (etcd and the controller-manager keep running). It gives the
// server two seconds to drain, then kills it: with the controller-manager's watches open a
// graceful shutdown takes the full grace period, and an outage is what the tests want anyway.
func (c *Cluster) StopAPIServer() error {
	if !c.local {
		return errors.New("stopping the API server is only possible on the local control plane")
	}
	return c.apiserver.Stop(2 * time.Second)
}

// Local reports whether this is the local control plane (which tests may stop and start).
func (c *Cluster) Local() bool { return c.local }

// APIServerPID is the process id of the local kube-apiserver, so a benchmark can read its CPU time
// from /proc/<pid>/stat; 0 when the cluster is external or the API server is not running.
func (c *Cluster) APIServerPID() int {
	if !c.local || c.apiserver == nil || c.apiserver.Exited() {
		return 0
	}
	return c.apiserver.Pid()
}

// ClientKubeconfig writes a kubeconfig at path that authenticates as user in groups with a client
// certificate from the cluster's CA: how a node's own components (the kubelet as
// system:node:<name> in system:nodes, kube-scheduler, kube-proxy) log in.
func (c *Cluster) ClientKubeconfig(path, user string, groups ...string) error {
	if !c.local {
		return errors.New("issuing client certificates is only possible on the local control plane")
	}
	name := "client-" + strings.NewReplacer(":", "_", "/", "_").Replace(user)
	crt, err := c.pki.issue(name, user, groups, nil, nil, false)
	if err != nil {
		return err
	}
	return writeKubeconfig(path, c.Config.Host, c.pki.caPEM, &clientcmdapi.AuthInfo{ClientCertificateData: crt.certPEM, ClientKeyData: crt.keyPEM})
}

// CAFile is the path of the cluster CA's certificate (what a kubelet trusts for client
// certificates); empty for an external cluster.
func (c *Cluster) CAFile() string {
	if !c.local {
		return ""
	}
	return c.pki.path("ca.crt")
}

// Clientset is an admin client.
func (c *Cluster) Clientset() kubernetes.Interface { return c.clientset }

// waitFor polls cond until it holds, failing early with the component's log if it exits.
func (c *Cluster) waitFor(ctx context.Context, p *childproc.Process, timeout time.Duration, cond wait.ConditionWithContextFunc) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if p.Exited() {
			return false, fmt.Errorf("%s exited: %v", p.Name, p.Err())
		}
		return cond(ctx)
	})
	if err != nil {
		return fmt.Errorf("waiting for %s: %w\n--- last lines of %s ---\n%s", p.Name, err, p.LogPath, p.LogTail(30))
	}
	return nil
}

// Stop stops every component and removes the cluster's folder. Safe to call more than once.
func (c *Cluster) Stop() error {
	if !c.local {
		return nil
	}
	var errs []error
	for _, p := range []*childproc.Process{c.kcm, c.apiserver, c.etcd} {
		if p != nil {
			errs = append(errs, p.Stop(15*time.Second))
		}
	}
	if c.dir != "" {
		errs = append(errs, os.RemoveAll(c.dir))
	}
	return errors.Join(errs...)
}

// NewNamespace creates a namespace with a generated name and deletes it when the test ends.
func (c *Cluster) NewNamespace(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	ns, err := c.clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "ehdb-test-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	t.Cleanup(func() {
		err := c.clientset.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Logf("deleting namespace %s: %v", ns.Name, err)
		}
	})
	return ns.Name
}

// ServiceAccountConfig returns a client configuration that authenticates AS the ServiceAccount,
// with a real token from the TokenRequest API, so requests go through RBAC like a pod's would.
func (c *Cluster) ServiceAccountConfig(ctx context.Context, ns, name string) (*rest.Config, error) {
	tr, err := c.clientset.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("requesting a token for %s/%s: %w", ns, name, err)
	}
	cfg := rest.AnonymousClientConfig(c.Config)
	cfg.BearerToken = tr.Status.Token
	return cfg, nil
}

// ServiceAccountKubeconfig writes a kubeconfig holding a token for the ServiceAccount, for a
// process the test starts (a writer running on the host as that ServiceAccount).
func (c *Cluster) ServiceAccountKubeconfig(ctx context.Context, ns, name, path string) error {
	cfg, err := c.ServiceAccountConfig(ctx, ns, name)
	if err != nil {
		return err
	}
	ca := cfg.CAData
	if len(ca) == 0 && cfg.CAFile != "" {
		if ca, err = os.ReadFile(cfg.CAFile); err != nil {
			return fmt.Errorf("reading CA file %s: %w", cfg.CAFile, err)
		}
	}
	return writeKubeconfig(path, cfg.Host, ca, &clientcmdapi.AuthInfo{Token: cfg.BearerToken})
}

func writeKubeconfig(path, host string, ca []byte, user *clientcmdapi.AuthInfo) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: host, CertificateAuthorityData: ca}
	kc.AuthInfos["user"] = user
	kc.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "user"}
	kc.CurrentContext = "local"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return nil
}
