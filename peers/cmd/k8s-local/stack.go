package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	nodefast "sigs.k8s.io/kwok/kustomize/stage/node/fast"
	nodeheartbeat "sigs.k8s.io/kwok/kustomize/stage/node/heartbeat-with-lease"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
)

// The label a Node carries for kwok to play its kubelet: a Node without it is no kwok's, so a
// machine whose kubelet stops (the label removed) goes NotReady as a real one does. A label, not
// an annotation: the API server filters a watch by label, and tells kwok a Node that stops
// matching as deleted, so kwok stops renewing its lease; an annotation selector is kwok's own
// filter, which drops the change and renews on.
const kwokLabel = "kwok.x-k8s.io/node=fake"

// How long each component has to answer once started.
const startBound = 90 * time.Second

// stack starts etcd, the API server, the controller-manager, the scheduler and kwok on loopback
// under DIR, with certificates made at start and RBAC on, writes DIR/admin.kubeconfig, prints one
// JSON line saying where everything is, and runs until SIGTERM or SIGINT (or until a component
// dies: exit 1). SIGUSR1 stops the API server and SIGUSR2 starts it again, for the tests of a
// controller that loses its API server.
func stack(args []string) int {
	flags := flag.NewFlagSet("stack", flag.ContinueOnError)
	dir := flags.String("dir", "", "the directory of the stack's certificates, data and logs (required)")
	if err := flags.Parse(args); err != nil || *dir == "" {
		fmt.Fprintln(os.Stderr, "usage: k8s-local stack --dir DIR")
		return 2
	}
	s, err := newStack(*dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "k8s-local stack: %v\n", err)
		return 1
	}
	defer s.stopAll()
	if err := s.start(); err != nil {
		fmt.Fprintf(os.Stderr, "k8s-local stack: %v\n", err)
		return 1
	}
	ready, _ := json.Marshal(map[string]any{
		"ready":      true,
		"server":     s.server(),
		"admin":      filepath.Join(s.dir, "admin.kubeconfig"),
		"ca":         filepath.Join(s.dir, "pki", "ca.crt"),
		"audit":      filepath.Join(s.dir, "audit.log"),
		"kwok_label": kwokLabel,
		"logs":       s.dir,
	})
	fmt.Println(string(ready))
	return s.wait()
}

// ports of the stack's components, each a free loopback port at start.
type ports struct {
	etcd, etcdPeer, apiserver, controllerManager, scheduler, kwok int
}

type stack_ struct {
	dir   string
	exe   string
	ports ports
	mu    sync.Mutex
	procs map[string]*exec.Cmd
	died  chan string
}

func newStack(dir string) (*stack_, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "pki"), 0o700); err != nil {
		return nil, err
	}
	free, err := freePorts(6)
	if err != nil {
		return nil, err
	}
	return &stack_{
		dir: dir,
		exe: exe,
		ports: ports{
			etcd: free[0], etcdPeer: free[1], apiserver: free[2],
			controllerManager: free[3], scheduler: free[4], kwok: free[5],
		},
		procs: map[string]*exec.Cmd{},
		died:  make(chan string, 8),
	}, nil
}

func (s *stack_) server() string {
	return fmt.Sprintf("https://127.0.0.1:%d", s.ports.apiserver)
}

func (s *stack_) path(parts ...string) string {
	return filepath.Join(append([]string{s.dir}, parts...)...)
}

// start makes the certificates and starts every component in order, each once the one before
// answers.
func (s *stack_) start() error {
	if err := makePKI(s.path("pki")); err != nil {
		return fmt.Errorf("making the certificates: %w", err)
	}
	if err := s.writeFiles(); err != nil {
		return err
	}
	etcd := fmt.Sprintf("http://127.0.0.1:%d", s.ports.etcd)
	peer := fmt.Sprintf("http://127.0.0.1:%d", s.ports.etcdPeer)
	if err := s.run("etcd",
		"--name", "default",
		"--data-dir", s.path("etcd"),
		"--listen-client-urls", etcd, "--advertise-client-urls", etcd,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "default="+peer,
		"--unsafe-no-fsync", "--log-level", "warn",
	); err != nil {
		return err
	}
	if err := waitFor("etcd", func() error { return get(http.DefaultClient, etcd+"/health") }); err != nil {
		return err
	}
	if err := s.startAPIServer(); err != nil {
		return err
	}
	admin := s.path("admin.kubeconfig")
	if err := s.run("kube-controller-manager",
		"--kubeconfig", admin, "--authentication-kubeconfig", admin, "--authorization-kubeconfig", admin,
		"--leader-elect=false", "--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", s.ports.controllerManager),
		"--service-account-private-key-file", s.path("pki", "sa.key"),
		"--root-ca-file", s.path("pki", "ca.crt"),
		"--cluster-signing-cert-file", s.path("pki", "ca.crt"),
		"--cluster-signing-key-file", s.path("pki", "ca.key"),
		// Nodes whose kubelet stops are NotReady within seconds, not the default 50.
		"--node-monitor-grace-period=20s", "--node-monitor-period=2s",
	); err != nil {
		return err
	}
	if err := s.run("kube-scheduler",
		"--kubeconfig", admin, "--authentication-kubeconfig", admin, "--authorization-kubeconfig", admin,
		"--leader-elect=false", "--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", s.ports.scheduler),
	); err != nil {
		return err
	}
	return s.run("kwok",
		"--kubeconfig", admin,
		"--manage-all-nodes=false",
		"--manage-nodes-with-label-selector="+kwokLabel,
		"--node-lease-duration-seconds=40",
		fmt.Sprintf("--server-address=127.0.0.1:%d", s.ports.kwok),
		"-c", s.path("kwok-stages.yaml"),
	)
}

// startAPIServer starts the API server and waits until it is ready.
func (s *stack_) startAPIServer() error {
	pki := func(name string) string { return s.path("pki", name) }
	if err := s.run("kube-apiserver",
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", s.ports.etcd),
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", s.ports.apiserver),
		"--tls-cert-file", pki("apiserver.crt"), "--tls-private-key-file", pki("apiserver.key"),
		"--client-ca-file", pki("ca.crt"),
		"--authorization-mode=Node,RBAC",
		"--service-cluster-ip-range=10.0.0.0/24",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file", pki("sa.pub"),
		"--service-account-signing-key-file", pki("sa.key"),
		"--api-audiences=https://kubernetes.default.svc",
		"--enable-priority-and-fairness=false",
		"--audit-policy-file", s.path("audit-policy.yaml"),
		"--audit-log-path", s.path("audit.log"),
		"--audit-log-format=json",
	); err != nil {
		return err
	}
	client, err := adminClient(s.path("pki"))
	if err != nil {
		return err
	}
	return waitFor("kube-apiserver", func() error { return get(client, s.server()+"/readyz") })
}

// writeFiles writes the admin's kubeconfig, the audit policy and kwok's stages.
func (s *stack_) writeFiles() error {
	ca, err := os.ReadFile(s.path("pki", "ca.crt"))
	if err != nil {
		return err
	}
	cert, err := os.ReadFile(s.path("pki", "admin.crt"))
	if err != nil {
		return err
	}
	key, err := os.ReadFile(s.path("pki", "admin.key"))
	if err != nil {
		return err
	}
	kubeconfig := map[string]any{
		"apiVersion":      "v1",
		"kind":            "Config",
		"current-context": "admin",
		"clusters": []any{map[string]any{"name": "k8s-local", "cluster": map[string]any{
			"server": s.server(), "certificate-authority-data": ca,
		}}},
		"users": []any{map[string]any{"name": "admin", "user": map[string]any{
			"client-certificate-data": cert, "client-key-data": key,
		}}},
		"contexts": []any{map[string]any{"name": "admin", "context": map[string]any{
			"cluster": "k8s-local", "user": "admin",
		}}},
	}
	text, err := json.MarshalIndent(kubeconfig, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(s.path("admin.kubeconfig"), text, 0o600); err != nil {
		return err
	}
	// Every request's metadata: who asked what of which resource, and the answer's code (the
	// tests hold fleet's calls against the RBAC deploy/ grants it).
	policy := "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n"
	if err := os.WriteFile(s.path("audit-policy.yaml"), []byte(policy), 0o600); err != nil {
		return err
	}
	stages := strings.Join([]string{
		nodefast.DefaultNodeInit,
		nodeheartbeat.DefaultNodeHeartbeatWithLease,
		podfast.DefaultPodReady,
		podfast.DefaultPodComplete,
		podfast.DefaultPodDelete,
	}, "\n---\n")
	return os.WriteFile(s.path("kwok-stages.yaml"), []byte(stages), 0o600)
}

// run starts one component, its output in DIR/<name>.log; a component that ends on its own is
// said on `died`.
func (s *stack_) run(name string, args ...string) error {
	log, err := os.OpenFile(s.path(name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.exe, append([]string{name}, args...)...)
	cmd.Stdout, cmd.Stderr = log, log
	// Killed with the stack, whatever kills it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("starting %s: %w", name, err)
	}
	s.mu.Lock()
	s.procs[name] = cmd
	s.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		log.Close()
		s.mu.Lock()
		current := s.procs[name] == cmd
		if current {
			delete(s.procs, name)
		}
		s.mu.Unlock()
		if current {
			s.died <- name
		}
	}()
	return nil
}

// stop ends one component: SIGTERM, then SIGKILL after 5 s.
func (s *stack_) stop(name string) {
	s.mu.Lock()
	cmd := s.procs[name]
	delete(s.procs, name)
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _, _ = cmd.Process.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
	}
}

func (s *stack_) stopAll() {
	for _, name := range []string{"kwok", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"} {
		s.stop(name)
	}
}

// wait runs until a signal to stop (0) or a component's death (1), restarting the API server on
// SIGUSR1 and SIGUSR2.
func (s *stack_) wait() int {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1, syscall.SIGUSR2)
	for {
		select {
		case sig := <-signals:
			switch sig {
			case syscall.SIGUSR1:
				s.stop("kube-apiserver")
				fmt.Println(`{"apiserver":"stopped"}`)
			case syscall.SIGUSR2:
				if err := s.startAPIServer(); err != nil {
					fmt.Fprintf(os.Stderr, "k8s-local stack: %v\n", err)
					return 1
				}
				fmt.Println(`{"apiserver":"started"}`)
			default:
				return 0
			}
		case name := <-s.died:
			fmt.Fprintf(os.Stderr, "k8s-local stack: %s ended; its log is %s\n", name, s.path(name+".log"))
			return 1
		}
	}
}

// waitFor polls `check` until it passes or `startBound` runs out.
func waitFor(what string, check func() error) error {
	deadline := time.Now().Add(startBound)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer within %s: %w", what, startBound, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func get(client *http.Client, url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", url, resp.Status)
	}
	return nil
}

// adminClient is an HTTPS client with the admin's certificate, trusting the stack's CA.
func adminClient(pki string) (*http.Client, error) {
	cert, err := tls.LoadX509KeyPair(filepath.Join(pki, "admin.crt"), filepath.Join(pki, "admin.key"))
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(filepath.Join(pki, "ca.crt"))
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("the stack's CA is no PEM certificate")
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		Certificates: []tls.Certificate{cert}, RootCAs: roots,
	}}}, nil
}

// freePorts finds n free loopback ports (bound at once, then released, so no two are the same).
func freePorts(n int) ([]int, error) {
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	var found []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		held = append(held, l)
		found = append(found, l.Addr().(*net.TCPAddr).Port)
	}
	return found, nil
}

// makePKI writes a CA, the API server's certificate, the admin's client certificate
// (system:masters) and the service-account signing key, each an ECDSA P-256 key.
func makePKI(dir string) error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTemplate := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "k8s-local-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	if err := writePair(dir, "ca", caDER, caKey); err != nil {
		return err
	}
	leaf := func(name string, serial int64, subject pkix.Name, usage x509.ExtKeyUsage, dns []string, ips []net.IP) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		template := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      subject,
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			DNSNames:     dns,
			IPAddresses:  ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, template, ca, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		return writePair(dir, name, der, key)
	}
	if err := leaf("apiserver", 2, pkix.Name{CommonName: "kube-apiserver"}, x509.ExtKeyUsageServerAuth,
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")}); err != nil {
		return err
	}
	if err := leaf("admin", 3, pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}},
		x509.ExtKeyUsageClientAuth, nil, nil); err != nil {
		return err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	saPub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}
	if err := writeKey(filepath.Join(dir, "sa.key"), saKey); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPub}), 0o600)
}

func writePair(dir, name string, der []byte, key *ecdsa.PrivateKey) error {
	if err := os.WriteFile(filepath.Join(dir, name+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return err
	}
	return writeKey(filepath.Join(dir, name+".key"), key)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}
