package etcdcluster

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
)

// DNSDiscovery finds the other members through the A/AAAA records of a headless Service that publishes
// not-ready addresses (publishNotReadyAddresses: true): every pod of the StatefulSet that has an address
// is listed, ready or not, so a member that is starting is seen. Its client URL is https://<pod IP>:port;
// member certificates hold their pod's IP addresses (LocalIPs). self are this member's own addresses,
// left out. A name that does not resolve (no pod has an address yet) is no error: nobody exists.
func DNSDiscovery(service string, clientPort int, self []string) func(context.Context) (Discovery, error) {
	return func(ctx context.Context) (Discovery, error) {
		addrs, err := net.DefaultResolver.LookupHost(ctx, service)
		if err != nil {
			if dnsErr, ok := err.(*net.DNSError); ok && dnsErr.IsNotFound {
				return Discovery{}, nil
			}
			return Discovery{}, fmt.Errorf("looking up the members behind %q: %w", service, err)
		}
		var d Discovery
		for _, a := range addrs {
			if slices.Contains(self, a) {
				continue
			}
			d.ClientURLs = append(d.ClientURLs, "https://"+net.JoinHostPort(a, strconv.Itoa(clientPort)))
			d.OtherPeersExist = true
		}
		slices.Sort(d.ClientURLs)
		return d, nil
	}
}

// Ordinal is the StatefulSet ordinal at the end of a pod name (<statefulset>-<ordinal>), or -1.
func Ordinal(name string) int {
	for i := len(name) - 1; i > 0; i-- {
		if name[i] == '-' {
			n, err := strconv.Atoi(name[i+1:])
			if err != nil || n < 0 || strconv.Itoa(n) != name[i+1:] {
				return -1
			}
			return n
		}
	}
	return -1
}

// MaxMembers is the most members a cluster may have: etcd advises at most seven voters, and the members'
// ports accept only the certificates of the names MemberNames lists, which must be known when etcd starts.
const MaxMembers = 9

// MemberNames are the names a member of name's StatefulSet can have, <statefulset>-0 to
// <statefulset>-(MaxMembers-1): the common names the members' client and peer ports accept, so that a
// certificate of the peer CA made for anything but a member reads and writes nothing. It is nil when name
// has no ordinal.
func MemberNames(name string) []string {
	o := Ordinal(name)
	if o < 0 {
		return nil
	}
	prefix := strings.TrimSuffix(name, strconv.Itoa(o))
	names := make([]string, MaxMembers)
	for i := range names {
		names[i] = prefix + strconv.Itoa(i)
	}
	return names
}
