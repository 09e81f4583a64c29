package kubectlcertapi

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/kubectl/pkg/util/templates"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/snapshot/sha256trailer"
)

// integrityRecordPrefix starts the line of stderr on which `certapi snapshot save -` prints the stream's
// integrity record, base64-encoded (snapshotcmd.IntegrityRecordPrefix; not imported, which would link etcd
// into the plugin).
const integrityRecordPrefix = "integrity record: "

// integritySuffix names a snapshot's integrity record beside it, as `certapi snapshot save FILE` and the
// scheduled snapshots write it, and as `certapi snapshot restore FILE` looks for it.
const integritySuffix = ".integrity"

var snapshotSaveLong = templates.LongDesc(`
	Copy a snapshot of certapi's etcd off the cluster: the CA (its private keys still encrypted as etcd
	holds them, with the encryption configuration's key, which is not in the snapshot) and every certapi
	object.

	The plugin finds the replica that leads (status.leader of CertificateAuthority/default), and runs
	"certapi snapshot save -" in its pod through pods/exec, as "kubectl exec" would, with the --data-dir
	and --encryption-provider-config the pod runs with. It needs what "kubectl exec" into certapi's pods
	needs (create on pods/exec in certapi's namespace), nothing more. The member streams the snapshot and
	checks etcd's SHA-256 trailer as it sends; with an encryption configuration it also prints the
	snapshot's integrity record, sealed with the key that encrypts the CA keys.

	FILE is written through a temporary file beside it (mode 0600), checked (etcd's trailer, and the size
	and SHA-256 the integrity record names), synced and renamed, so FILE is a complete snapshot or absent;
	the integrity record goes beside it as FILE.integrity, where "certapi snapshot restore FILE" looks for
	it. An existing FILE is never overwritten. FILE "-" writes the snapshot to stdout and the record, on
	stderr, as "integrity record: " and the record base64-encoded, as "certapi snapshot save -" does.

	Restore it as docs/backup-and-restore.md says ("certapi snapshot restore"). With certapi on an external
	etcd (--etcd-servers), save from where that etcd is reachable instead: "certapi snapshot save FILE
	--etcd-servers=...".`)

var snapshotSaveExample = templates.Examples(`
	# A snapshot of certapi's etcd in certapi.db, its integrity record in certapi.db.integrity
	kubectl certapi snapshot save certapi.db

	# Streamed to another tool (the record on stderr)
	kubectl certapi snapshot save - 2> certapi.db.log | gzip > certapi.db.gz`)

// snapshotSaveOptions are the flags of `snapshot save`.
type snapshotSaveOptions struct {
	*rootOptions
	pod     string
	timeout time.Duration
}

// newSnapshotCmd returns `snapshot`, whose only subcommand is `save`.
func newSnapshotCmd(root *rootOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Copy a snapshot of certapi's etcd (the CA, encrypted, and every certapi object) to a local file",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
	}
	o := &snapshotSaveOptions{rootOptions: root}
	save := &cobra.Command{
		Use:     "save FILE",
		Short:   "Stream a snapshot of certapi's etcd from the leader's pod into FILE (or - for stdout), with its integrity record",
		Long:    snapshotSaveLong,
		Example: snapshotSaveExample,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), args[0])
		},
	}
	save.Flags().StringVar(&o.pod, "pod", "", "Save from this certapi pod instead of the leader's (any member answers with every acknowledged write).")
	save.Flags().DurationVar(&o.timeout, "timeout", 5*time.Minute, "Give up when the snapshot has not been saved within this time.")
	cmd.AddCommand(save)
	return cmd
}

// run saves the snapshot into file ("-": stdout).
func (o *snapshotSaveOptions) run(ctx context.Context, file string) error {
	if err := positive("timeout", o.timeout); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if file != "-" {
		if _, err := os.Lstat(file); err == nil {
			return fmt.Errorf("%s exists: a snapshot is never overwritten; move it aside or give another FILE", file)
		}
		if fi, err := os.Stat(filepath.Dir(file)); err != nil || !fi.IsDir() {
			return fmt.Errorf("the directory of %s does not exist: %v", file, err)
		}
	}
	c, err := o.clients()
	if err != nil {
		return err
	}
	pod, err := o.sourcePod(ctx, c)
	if err != nil {
		return err
	}
	container, command, err := saveCommand(pod)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.ErrOut, "Saving a snapshot of certapi's etcd from pod %s/%s\n", pod.Namespace, pod.Name)

	start := time.Now()
	var out io.Writer = o.Out
	var tmp *os.File
	if file != "-" {
		if tmp, err = os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".part-*"); err != nil {
			return fmt.Errorf("creating a temporary file beside %s: %w", file, err)
		}
		defer func() {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}()
		out = tmp
	}
	trailer := sha256trailer.NewWriter()
	digest := sha256.New()
	var stderr bytes.Buffer
	if err := c.exec(ctx, pod, container, command, io.MultiWriter(out, trailer, digest), &stderr); err != nil {
		return fmt.Errorf("certapi snapshot save - in pod %s/%s: %w%s", pod.Namespace, pod.Name, err, underError(stderr.String()))
	}
	record, log := splitSaveLog(stderr.String())
	if err := trailer.Check(); err != nil {
		return fmt.Errorf("the snapshot received from pod %s/%s is not complete; discard it: %w", pod.Namespace, pod.Name, err)
	}
	var rec []byte
	if record != "" {
		if rec, err = base64.StdEncoding.DecodeString(record); err != nil {
			return fmt.Errorf("the integrity record pod %s/%s printed is not base64: %w", pod.Namespace, pod.Name, err)
		}
		if err := matchRecord(rec, trailer.Size(), digest.Sum(nil)); err != nil {
			return fmt.Errorf("the snapshot received from pod %s/%s: %w; discard it", pod.Namespace, pod.Name, err)
		}
	}
	if file == "-" {
		if _, err := io.WriteString(o.ErrOut, prefixLines(log, pod.Name+": ")); err != nil {
			return err
		}
		if record != "" {
			_, err = fmt.Fprintf(o.ErrOut, "%s%s\n", integrityRecordPrefix, record)
		}
		return err
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", tmp.Name(), err)
	}
	integrity := "integrity: none (certapi runs without an encryption configuration: a restore cannot tell this snapshot from a crafted one)"
	if rec != nil {
		if err := writeNew(file+integritySuffix, rec); err != nil {
			return err
		}
		integrity = "integrity: record in " + file + integritySuffix
	}
	if err := os.Link(tmp.Name(), file); err != nil {
		return fmt.Errorf("moving the snapshot into place as %s: %w", file, err)
	}
	if d, err := os.Open(filepath.Dir(file)); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	_, err = fmt.Fprintf(o.Out, "Saved %s (%d bytes, etcd's SHA-256 trailer verified) from pod %s/%s in %s\n%s\n%s",
		file, trailer.Size(), pod.Namespace, pod.Name, time.Since(start).Round(time.Millisecond), integrity, prefixLines(log, pod.Name+": "))
	return err
}

// prefixLines puts prefix before each line of s, to tell what the pod printed from the plugin's own lines.
func prefixLines(s, prefix string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		b.WriteString(prefix)
		b.WriteString(line)
	}
	return b.String()
}

// sourcePod is the pod to save from: --pod, or the leader's. certapi's namespace is that of its
// APIService's Service unless -n gives it.
func (o *snapshotSaveOptions) sourcePod(ctx context.Context, c *clients) (*corev1.Pod, error) {
	ns, explicit, err := o.namespace()
	if err != nil {
		return nil, err
	}
	if !explicit {
		svc, err := c.aggregator.ApiregistrationV1().APIServices().Get(ctx, apiServiceName, metav1.GetOptions{})
		switch {
		case err != nil:
			return nil, fmt.Errorf("reading the APIService %s to find certapi's namespace (or give -n): %w", apiServiceName, err)
		case svc.Spec.Service == nil:
			return nil, fmt.Errorf("the APIService %s names no Service: certapi does not run in the cluster; save with certapi snapshot save where it runs", apiServiceName)
		}
		ns = svc.Spec.Service.Namespace
	}
	name := o.pod
	if name == "" {
		ca, err := c.certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("reading %s to find the replica that leads (or give --pod): %w", caResource, err)
		}
		leader, err := leaderIdentity(ca)
		if err != nil {
			return nil, fmt.Errorf("finding the replica that leads: %w (see kubectl certapi check, or give --pod)", err)
		}
		name = leader
	}
	pod, err := c.kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && o.pod == "" {
		// A --leader-identity of its own (host name and a suffix) when certapi was not installed by the
		// chart: the pod is the host name.
		if host, _, ok := strings.Cut(name, "_"); ok {
			pod, err = c.kube.CoreV1().Pods(ns).Get(ctx, host, metav1.GetOptions{})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("the pod %s of certapi's leader in namespace %s: %w (give -n or --pod)", name, ns, err)
	}
	return pod, nil
}

// saveCommand is the container to exec in and the `certapi snapshot save -` to run there, with the
// --data-dir and --encryption-provider-config of the certapi that runs in it (pod's own flags; the
// defaults when absent). A certapi on an external etcd is refused: its etcd is not in the pod. A pure
// function.
func saveCommand(pod *corev1.Pod) (string, []string, error) {
	var c *corev1.Container
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == "certapi" {
			c = &pod.Spec.Containers[i]
		}
	}
	if c == nil {
		return "", nil, fmt.Errorf("pod %s/%s has no container named certapi: not a certapi pod", pod.Namespace, pod.Name)
	}
	cmd := []string{"certapi", "snapshot", "save", "-"}
	for _, a := range append(append([]string(nil), c.Command...), c.Args...) {
		flag, value, _ := strings.Cut(a, "=")
		switch flag {
		case "--etcd-servers":
			return "", nil, fmt.Errorf("certapi in pod %s/%s runs on an external etcd (%s): save from where that etcd is reachable, "+
				"with certapi snapshot save FILE --etcd-servers=... (docs/backup-and-restore.md)", pod.Namespace, pod.Name, a)
		case "--data-dir", "--encryption-provider-config":
			cmd = append(cmd, flag+"="+value)
		}
	}
	return c.Name, cmd, nil
}

// splitSaveLog takes the integrity record's line out of what `certapi snapshot save -` printed on stderr:
// the record (base64, empty when none) and the rest.
func splitSaveLog(stderr string) (string, string) {
	var record string
	var rest strings.Builder
	sc := bufio.NewScanner(strings.NewReader(stderr))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if r, ok := strings.CutPrefix(sc.Text(), integrityRecordPrefix); ok {
			record = strings.TrimSpace(r)
			continue
		}
		rest.WriteString(sc.Text())
		rest.WriteByte('\n')
	}
	return record, rest.String()
}

// matchRecord checks that a snapshot of size bytes with SHA-256 sum is the one the integrity record names
// (its plain size and digest; the sealed copy of them is for the restore, which holds the key).
func matchRecord(rec []byte, size int64, sum []byte) error {
	var r struct {
		Kind   string `json:"kind"`
		Size   int64  `json:"size"`
		SHA256 string `json:"sha256"`
	}
	if err := json.Unmarshal(rec, &r); err != nil || r.Kind != "CertapiSnapshotIntegrity" {
		return fmt.Errorf("the integrity record printed with it is not one certapi writes (%v)", err)
	}
	if r.Size != size || r.SHA256 != hex.EncodeToString(sum) {
		return fmt.Errorf("it is not the snapshot its integrity record names (%d bytes, SHA-256 %s; the record: %d bytes, %s)",
			size, hex.EncodeToString(sum), r.Size, r.SHA256)
	}
	return nil
}

// writeNew writes data to a new file path, mode 0600, through a temporary file beside it; an existing
// path is refused.
func writeNew(path string, data []byte) error {
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("%s exists: an integrity record is never overwritten; move it aside", path)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".part-*")
	if err != nil {
		return fmt.Errorf("creating a temporary file beside %s: %w", path, err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("writing %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("syncing %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", tmp.Name(), err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		return fmt.Errorf("moving the integrity record into place as %s: %w", path, err)
	}
	return nil
}

// exec runs command in the container of pod through pods/exec (websocket, falling back to SPDY, as
// kubectl exec does), with stdout and stderr to the writers and no stdin.
func (c *clients) exec(ctx context.Context, pod *corev1.Pod, container string, command []string, stdout, stderr io.Writer) error {
	u := c.kube.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: command, Stdout: true, Stderr: true}, scheme.ParameterCodec).URL()
	spdy, err := remotecommand.NewSPDYExecutor(c.config, http.MethodPost, u)
	if err != nil {
		return fmt.Errorf("making the SPDY executor: %w", err)
	}
	ws, err := remotecommand.NewWebSocketExecutor(c.config, http.MethodGet, u.String())
	if err != nil {
		return fmt.Errorf("making the websocket executor: %w", err)
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return err
	}
	return ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: stdout, Stderr: stderr})
}

// underError prints a command's output under an error, indented.
func underError(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	return ":\n  " + strings.ReplaceAll(s, "\n", "\n  ")
}
