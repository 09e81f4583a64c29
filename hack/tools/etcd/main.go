// Command etcd is a plain etcd server built from go.etcd.io/etcd/server/v3, so that tests need no
// prebuilt binary: it accepts exactly etcd's own flags.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
