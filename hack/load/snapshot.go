package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certapi/certapi/test/framework"
)

// snapshotTimeout bounds `certapi snapshot save` and `certapi snapshot restore`.
const snapshotTimeout = 10 * time.Minute

// snapshot measures backup and restore of the embedded etcd (--snapshot, with --local): `certapi snapshot
// save` while certapi runs, then certapi stopped, its data dir deleted, `certapi snapshot restore`, certapi
// started again, and the time until the APIService is Available and every ServingCertRequest is listed.
func (l *loader) snapshot(ctx context.Context) error {
	if l.cp == nil {
		return fmt.Errorf("--snapshot needs --local: it runs certapi's embedded etcd and restarts certapi")
	}
	bin, err := framework.CertapiBinary(ctx)
	if err != nil {
		return err
	}
	scrs := l.certapi.CertapiV1alpha1().ServingCertRequests(l.o.namespace)
	list, err := scrs.List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	want := len(list.Items)
	dataDir := filepath.Join(l.cp.Dir, "certapi-data")
	file := filepath.Join(l.cp.Dir, "certapi.db")
	cmd := func(args ...string) (string, time.Duration, error) {
		cctx, cancel := context.WithTimeout(ctx, snapshotTimeout)
		defer cancel()
		start := time.Now()
		out, err := exec.CommandContext(cctx, bin, args...).CombinedOutput()
		took := time.Since(start)
		if err != nil {
			return "", took, fmt.Errorf("certapi %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		return string(out), took, nil
	}
	out, saveTook, err := cmd("snapshot", "save", file, "--data-dir="+dataDir)
	if err != nil {
		return err
	}
	fmt.Printf("snapshot save with %d ServingCertRequests: %s (command)\n%s", want, saveTook.Round(time.Millisecond), indent(out))

	if err := l.cp.StopCertapi(); err != nil {
		return err
	}
	if err := os.RemoveAll(dataDir); err != nil {
		return err
	}
	out, restoreTook, err := cmd("snapshot", "restore", file, "--data-dir="+dataDir)
	if err != nil {
		return err
	}
	fmt.Printf("snapshot restore: %s (command)\n%s", restoreTook.Round(time.Millisecond), indent(out))
	start := time.Now()
	if err := l.cp.StartCertapi(ctx); err != nil {
		return err
	}
	if err := l.cp.WaitAPIServiceAvailable(ctx); err != nil {
		return err
	}
	available := time.Since(start)
	list, err = scrs.List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	if len(list.Items) != want {
		return fmt.Errorf("after the restore certapi lists %d ServingCertRequests, want %d", len(list.Items), want)
	}
	fmt.Printf("snapshot: restored certapi started to APIService Available in %s; all %d ServingCertRequests listed after %s\n",
		available.Round(time.Millisecond), want, time.Since(start).Round(time.Millisecond))
	return nil
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ") + "\n"
}
