package framework

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// kubeProxyCleanup removes every rule and chain kube-proxy adds (`kube-proxy --cleanup`).
func kubeProxyCleanup(ctx context.Context) error {
	bin, err := toolBinary("kube-proxy", EnvKubeProxyBin)
	if err != nil {
		return err
	}
	_, err = command(ctx, bin, "--cleanup")
	return err
}

// kubeChains lists the iptables chains named KUBE-* in the filter, nat and mangle tables (kube-proxy's).
func kubeChains(ctx context.Context) []string {
	var left []string
	for _, table := range []string{"filter", "nat", "mangle"} {
		out, err := command(ctx, "iptables", "-w", "-t", table, "-S")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "-N KUBE-") {
				left = append(left, fmt.Sprintf("iptables chain %s/%s", table, strings.TrimPrefix(line, "-N ")))
			}
		}
	}
	return left
}

// removeKubeChains deletes every rule that jumps to a KUBE-* chain from the other chains of the filter, nat
// and mangle tables, then flushes and deletes the KUBE-* chains.
func removeKubeChains(ctx context.Context) error {
	var errs []error
	for _, table := range []string{"filter", "nat", "mangle"} {
		out, err := command(ctx, "iptables", "-w", "-t", table, "-S")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var chains []string
		for _, line := range strings.Split(out, "\n") {
			if name, ok := strings.CutPrefix(line, "-N "); ok && strings.HasPrefix(name, "KUBE-") {
				chains = append(chains, name)
				continue
			}
			rule, ok := strings.CutPrefix(line, "-A ")
			if !ok || strings.HasPrefix(rule, "KUBE-") || !strings.Contains(rule, " -j KUBE-") {
				continue
			}
			spec, err := splitIptablesRule(rule)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if _, err := command(ctx, "iptables", append([]string{"-w", "-t", table, "-D"}, spec...)...); err != nil {
				errs = append(errs, err)
			}
		}
		for _, c := range chains {
			if _, err := command(ctx, "iptables", "-w", "-t", table, "-F", c); err != nil {
				errs = append(errs, err)
			}
		}
		for _, c := range chains {
			if _, err := command(ctx, "iptables", "-w", "-t", table, "-X", c); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
