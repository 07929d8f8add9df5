// client_gomemcache.go — Go's gomemcache against rkv's tcp door, as a Go
// service uses it. Usage: go run client_gomemcache.go HOST:PORT
// Run by tests/memcached_clients.sh; exits 1 at the first wrong answer.
package main

import (
	"fmt"
	"os"
	"reflect"

	"github.com/bradfitz/gomemcache/memcache"
)

func check(what string, ok bool) {
	if !ok {
		fmt.Fprintf(os.Stderr, "client_gomemcache: %s\n", what)
		os.Exit(1)
	}
}

func main() {
	mc := memcache.New(os.Args[1])

	check("set", mc.Set(&memcache.Item{Key: "go:greeting", Value: []byte("hello"), Flags: 7, Expiration: 60}) == nil)
	it, err := mc.Get("go:greeting")
	check("get", err == nil && string(it.Value) == "hello" && it.Flags == 7)
	_, err = mc.Get("go:absent")
	check("get miss", err == memcache.ErrCacheMiss)
	check("add existing", mc.Add(&memcache.Item{Key: "go:greeting", Value: []byte("x")}) == memcache.ErrNotStored)
	check("replace absent", mc.Replace(&memcache.Item{Key: "go:absent", Value: []byte("x")}) == memcache.ErrNotStored)

	// cas: Get carries the token; a store under it, then a stale one
	it, err = mc.Get("go:greeting")
	check("get for cas", err == nil)
	it.Value = []byte("swapped")
	check("cas", mc.CompareAndSwap(it) == nil)
	it.Value = []byte("again")
	check("cas stale", mc.CompareAndSwap(it) == memcache.ErrCASConflict)
	it, err = mc.Get("go:greeting")
	check("after cas", err == nil && string(it.Value) == "swapped")

	// counters
	check("set counter", mc.Set(&memcache.Item{Key: "go:n", Value: []byte("10")}) == nil)
	n, err := mc.Increment("go:n", 5)
	check("increment", err == nil && n == 15)
	n, err = mc.Decrement("go:n", 20)
	check("decrement", err == nil && n == 0)
	_, err = mc.Increment("go:none", 1)
	check("increment absent", err == memcache.ErrCacheMiss)

	// multi-get
	for _, k := range []string{"go:k1", "go:k2", "go:k3"} {
		check("set "+k, mc.Set(&memcache.Item{Key: k, Value: []byte("v-" + k)}) == nil)
	}
	got, err := mc.GetMulti([]string{"go:k1", "go:k2", "go:k3", "go:nope"})
	check("getmulti", err == nil && len(got) == 3)
	vals := map[string]string{}
	for k, v := range got {
		vals[k] = string(v.Value)
	}
	check("getmulti values", reflect.DeepEqual(vals, map[string]string{
		"go:k1": "v-go:k1", "go:k2": "v-go:k2", "go:k3": "v-go:k3"}))

	// touch, delete
	check("touch", mc.Touch("go:k1", 100) == nil)
	check("delete", mc.Delete("go:k1") == nil)
	check("delete again", mc.Delete("go:k1") == memcache.ErrCacheMiss)

	// flush
	check("flush", mc.FlushAll() == nil)
	_, err = mc.Get("go:k2")
	check("gone after flush", err == memcache.ErrCacheMiss)
	fmt.Println("client_gomemcache: ok")
}
