<?php
// client.php — PHP's Memcached extension (libmemcached underneath) against
// rkv's tcp door, as a PHP application uses it. Usage: php client.php HOST:PORT
// Run by tests/memcached_clients.sh; exits 1 at the first wrong answer.
[$host, $port] = explode(':', $argv[1]);

function check($what, $ok) {
    if (!$ok) {
        fwrite(STDERR, "client.php: $what\n");
        exit(1);
    }
}

$m = new Memcached();
$m->addServer($host, (int)$port);
$m->setOption(Memcached::OPT_COMPRESSION, false);

check('set', $m->set('php:greeting', 'hello', 60));
check('get', $m->get('php:greeting') === 'hello');
check('get miss', $m->get('php:absent') === false && $m->getResultCode() === Memcached::RES_NOTFOUND);
check('set array (serialized)', $m->set('php:arr', ['a' => 1, 'b' => [2, 3]]));
check('get array', $m->get('php:arr') === ['a' => 1, 'b' => [2, 3]]);
check('add existing', $m->add('php:greeting', 'x') === false);
check('replace', $m->replace('php:greeting', 'hi'));
check('append', $m->append('php:greeting', '!') && $m->get('php:greeting') === 'hi!');

// cas: a fetch with its token, a store under it, a stale token refused
$r = $m->get('php:greeting', null, Memcached::GET_EXTENDED);
check('get extended', is_array($r) && $r['value'] === 'hi!' && $r['cas'] > 0);
check('cas', $m->cas($r['cas'], 'php:greeting', 'swapped'));
check('cas stale', $m->cas($r['cas'], 'php:greeting', 'again') === false &&
      $m->getResultCode() === Memcached::RES_DATA_EXISTS);
check('after cas', $m->get('php:greeting') === 'swapped');

// counters
check('set counter', $m->set('php:n', 10));
check('increment', $m->increment('php:n', 5) === 15);
check('decrement', $m->decrement('php:n', 20) === 0);
check('increment absent', $m->increment('php:none', 1) === false);

// multi-get
check('setMulti', $m->setMulti(['php:k1' => 'v1', 'php:k2' => 'v2', 'php:k3' => 'v3']));
$got = $m->getMulti(['php:k1', 'php:k2', 'php:k3', 'php:nope']);
check('getMulti', $got === ['php:k1' => 'v1', 'php:k2' => 'v2', 'php:k3' => 'v3']);

// touch, delete
check('touch', $m->touch('php:k1', 100));
check('delete', $m->delete('php:k1'));
check('delete again', $m->delete('php:k1') === false && $m->getResultCode() === Memcached::RES_NOTFOUND);

// stats and version, as monitoring reads them
$stats = $m->getStats();
$s = reset($stats);
check('getStats', is_array($s) && isset($s['curr_items'], $s['cmd_get'], $s['get_hits']) && $s['pid'] > 0);
$versions = $m->getVersion();
check('getVersion', strpos(reset($versions), '1.6.18') === 0);

// flush
check('flush', $m->flush());
check('gone after flush', $m->get('php:k2') === false);
echo "client.php: ok\n";
