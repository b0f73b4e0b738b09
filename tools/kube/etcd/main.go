// Command etcd is the etcd server of a pinned release, for kaidash's real-API-server tests.
// The release's own main module (go.etcd.io/etcd/v3) cannot be built with `go install` because of its
// replace directives, so this calls the same entry point from the published server module.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
