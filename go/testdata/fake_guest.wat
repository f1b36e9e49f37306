;; A stand-in for an omlet core rule, for the runtime's tests: it speaks
;; the ABI of docs/abi.md without evaluating anything. Routes by model name
;; pick a behaviour by the name's first letter (see $mode below); any other
;; call echoes its input frame. Assembled with binaryen:
;;   wasm-as -all fake_guest.wat -o fake_guest.wasm
(module
  (import "omlet:core@1" "query" (func $query (param i32 i32 i32 i32 i32) (result i32)))
  (import "omlet:core@1" "columns" (func $columns (param i32 i32 i32) (result i32)))
  (import "omlet:core@1" "intranet_nets" (func $nets (param i32 i32) (result i32)))
  (import "omlet:core@1" "take" (func $take (param i32 i32)))
  (import "omlet:core@1" "now" (func $now (param i32)))
  (import "omlet:core@1" "tick" (func $tick (result i32)))
  (memory (export "memory") 2)
  (global $in_cap (mut i32) (i32.const 0))
  ;; The yield points of docs/abi.md, at every loop header as `omlet build
  ;; --target core` puts them: the budget counts loop headers down to the
  ;; next call of tick.
  (global $budget (mut i32) (i32.const 10000))
  (export "omlet_tick_budget" (global $budget))
  (data (i32.const 2048) "{\"abi\":1,\"ir_version\":7,\"source_hash\":\"abc\",\"uses_clock\":true,\"models\":[{\"name\":\"m\",\"patterns\":[\"/m/*\"],\"enabled\":true,\"file\":\"m.oml\",\"statements\":[0],\"lookups\":[{\"statement\":0,\"line\":3,\"sql\":\"select a from t where k = 1\"}]}],\"statements\":[{\"sql\":\"select a from t where k = :k\",\"params\":[\"k\"],\"table\":\"t\",\"columns\":[\"a\"],\"helpers\":[],\"file\":\"m.oml\",\"line\":3,\"column\":5}]}")
  (data (i32.const 8000) "{\"steps\":[]}")

  (func (export "omlet_abi_version") (result i32) (i32.const 1))
  (func (export "omlet_return_area") (result i32) (i32.const 1024))

  (func $ret (param $status i32) (param $ptr i32) (param $len i32)
    (i32.store (i32.const 1024) (local.get $status))
    (i32.store (i32.const 1028) (local.get $ptr))
    (i32.store (i32.const 1032) (local.get $len)))

  ;; The input buffer is at 65536; room for twice the capacity after it,
  ;; where answers are written.
  (func (export "omlet_input") (param $cap i32) (result i32)
    (local $need i32)
    (if (i32.gt_u (local.get $cap) (global.get $in_cap))
      (then
        (local.set $need
          (i32.sub
            (i32.add (i32.const 2) (i32.shr_u (i32.add (i32.mul (local.get $cap) (i32.const 2)) (i32.const 65599)) (i32.const 16)))
            (memory.size)))
        (if (i32.gt_s (local.get $need) (i32.const 0))
          (then
            (if (i32.eq (memory.grow (local.get $need)) (i32.const -1))
              (then (return (i32.const 0))))))
        (global.set $in_cap (local.get $cap))))
    (i32.const 65536))

  (func $out (result i32) (i32.add (i32.const 65536) (global.get $in_cap)))

  (func (export "omlet_info") (call $ret (i32.const 0) (i32.const 2048) (i32.const 371)))

  ;; The behaviour a call asks for: the first letter of a model route's
  ;; name, else 0.
  (func $mode (param $route i32) (param $rlen i32) (result i32)
    (if (result i32) (i32.and (i32.eq (local.get $route) (i32.const 2)) (i32.gt_u (local.get $rlen) (i32.const 0)))
      (then (i32.load8_u (i32.const 65536)))
      (else (i32.const 0))))

  ;; Behaviours every call shares: l loops, b loops without a yield point
  ;; (as a module from elsewhere might: only wazero's interruption stops
  ;; it), t traps, g grows memory until it cannot, r rejects and u is
  ;; unrouted (the route's text as message). Returns 1 when it answered.
  (func $common (param $m i32) (param $rlen i32) (result i32)
    (if (i32.eq (local.get $m) (i32.const 98)) (then (loop $bare (br $bare))))
    (if (i32.eq (local.get $m) (i32.const 108)) (then (loop $forever (global.set $budget (i32.sub (global.get $budget) (i32.const 1))) (if (i32.eqz (global.get $budget)) (then (global.set $budget (call $tick)))) (br $forever))))
    (if (i32.eq (local.get $m) (i32.const 116)) (then (unreachable)))
    (if (i32.eq (local.get $m) (i32.const 103))
      (then
        (loop $grow (global.set $budget (i32.sub (global.get $budget) (i32.const 1))) (if (i32.eqz (global.get $budget)) (then (global.set $budget (call $tick)))) (br_if $grow (i32.ne (memory.grow (i32.const 16)) (i32.const -1))))
        (unreachable)))
    (if (i32.eq (local.get $m) (i32.const 114))
      (then (call $ret (i32.const 4) (i32.const 65536) (local.get $rlen)) (return (i32.const 1))))
    (if (i32.eq (local.get $m) (i32.const 117))
      (then (call $ret (i32.const 1) (i32.const 65536) (local.get $rlen)) (return (i32.const 1))))
    (i32.const 0))

  (func (export "omlet_evaluate") (param $gen i64) (param $route i32) (param $rlen i32) (param $flen i32)
    (local $m i32) (local $n i32) (local $frame i32)
    (local.set $m (call $mode (local.get $route) (local.get $rlen)))
    (local.set $frame (i32.add (i32.const 65536) (local.get $rlen)))
    (if (call $common (local.get $m) (local.get $rlen)) (then (return)))
    ;; q: query statement 0 with the frame's bytes as parameters; the raw
    ;; answer is the output (a 4-byte buffer, so long answers go by take).
    (if (i32.eq (local.get $m) (i32.const 113))
      (then
        (local.set $n (call $query (i32.const 0) (local.get $frame) (local.get $flen) (call $out) (i32.const 4)))
        (if (i32.gt_u (local.get $n) (i32.const 4)) (then (call $take (call $out) (local.get $n))))
        (call $ret (i32.const 0) (call $out) (local.get $n))
        (return)))
    ;; c: columns of statement 0; i: the intranet networks; n: now;
    ;; G: the generation.
    (if (i32.eq (local.get $m) (i32.const 99))
      (then
        (local.set $n (call $columns (i32.const 0) (call $out) (i32.const 0)))
        (call $take (call $out) (local.get $n))
        (call $ret (i32.const 0) (call $out) (local.get $n))
        (return)))
    (if (i32.eq (local.get $m) (i32.const 105))
      (then
        (local.set $n (call $nets (call $out) (i32.const 4096)))
        (call $ret (i32.const 0) (call $out) (local.get $n))
        (return)))
    (if (i32.eq (local.get $m) (i32.const 110))
      (then
        (call $now (call $out))
        (call $ret (i32.const 0) (call $out) (i32.const 12))
        (return)))
    (if (i32.eq (local.get $m) (i32.const 71))
      (then
        (i64.store (call $out) (local.get $gen))
        (call $ret (i32.const 0) (call $out) (i32.const 8))
        (return)))
    ;; E: the call is wrong (status 3).
    (if (i32.eq (local.get $m) (i32.const 69))
      (then (call $ret (i32.const 3) (i32.const 65536) (local.get $rlen)) (return)))
    (call $ret (i32.const 0) (local.get $frame) (local.get $flen)))

  ;; Batches echo their frame with no errors. T traps when the frame holds
  ;; more than one record (so that a batch is retried record by record).
  (func (export "omlet_evaluate_batch") (param $gen i64) (param $route i32) (param $rlen i32) (param $flen i32)
    (local $m i32) (local $frame i32) (local $o i32)
    (local.set $m (call $mode (local.get $route) (local.get $rlen)))
    (local.set $frame (i32.add (i32.const 65536) (local.get $rlen)))
    (if (call $common (local.get $m) (local.get $rlen)) (then (return)))
    (if (i32.and (i32.eq (local.get $m) (i32.const 84)) (i32.gt_u (i32.load (local.get $frame)) (i32.const 1)))
      (then (unreachable)))
    (if (i32.eq (local.get $m) (i32.const 69))
      (then (call $ret (i32.const 3) (i32.const 65536) (local.get $rlen)) (return)))
    (local.set $o (call $out))
    (i32.store (local.get $o) (local.get $flen))
    (memory.copy (i32.add (local.get $o) (i32.const 4)) (local.get $frame) (local.get $flen))
    (i32.store (i32.add (local.get $o) (i32.add (i32.const 4) (local.get $flen))) (i32.const 0))
    (call $ret (i32.const 0) (local.get $o) (i32.add (local.get $flen) (i32.const 8))))

  ;; Lines: each record's line is {"n":K} (K its 0-based place), but
  ;; record 1 is rejected with the message "no" when the route is model x.
  (func (export "omlet_evaluate_lines") (param $gen i64) (param $route i32) (param $rlen i32) (param $flen i32)
    (local $m i32) (local $n i32) (local $k i32) (local $o i32) (local $t i32) (local $e i32) (local $lines i32) (local $skip i32)
    (local.set $m (call $mode (local.get $route) (local.get $rlen)))
    (if (call $common (local.get $m) (local.get $rlen)) (then (return)))
    (local.set $n (i32.load (i32.add (i32.const 65536) (local.get $rlen))))
    (local.set $skip (if (result i32) (i32.and (i32.eq (local.get $m) (i32.const 120)) (i32.gt_u (local.get $n) (i32.const 1)))
      (then (i32.const 1)) (else (i32.const -1))))
    (local.set $o (call $out))
    ;; text at o+4; each line is 8 bytes: {"n":K}\n with K one digit.
    (local.set $t (i32.add (local.get $o) (i32.const 4)))
    (local.set $k (i32.const 0))
    (local.set $lines (i32.const 0))
    (block $done
      (loop $each (global.set $budget (i32.sub (global.get $budget) (i32.const 1))) (if (i32.eqz (global.get $budget)) (then (global.set $budget (call $tick))))
        (br_if $done (i32.ge_u (local.get $k) (local.get $n)))
        (if (i32.ne (local.get $k) (local.get $skip))
          (then
            (i64.store (local.get $t) (i64.const 0x3a226e227b))
            (i32.store8 (i32.add (local.get $t) (i32.const 5)) (i32.add (i32.const 48) (i32.rem_u (local.get $k) (i32.const 10))))
            (i32.store8 (i32.add (local.get $t) (i32.const 6)) (i32.const 125))
            (i32.store8 (i32.add (local.get $t) (i32.const 7)) (i32.const 10))
            (local.set $t (i32.add (local.get $t) (i32.const 8)))
            (local.set $lines (i32.add (local.get $lines) (i32.const 1)))))
        (local.set $k (i32.add (local.get $k) (i32.const 1)))
        (br $each)))
    (i32.store (local.get $o) (i32.mul (local.get $lines) (i32.const 8)))
    (i32.store (local.get $t) (local.get $lines))
    (local.set $e (i32.add (local.get $t) (i32.const 4)))
    (local.set $k (i32.const 1))
    (block $done2
      (loop $ends (global.set $budget (i32.sub (global.get $budget) (i32.const 1))) (if (i32.eqz (global.get $budget)) (then (global.set $budget (call $tick))))
        (br_if $done2 (i32.gt_u (local.get $k) (local.get $lines)))
        (i32.store (local.get $e) (i32.mul (local.get $k) (i32.const 8)))
        (local.set $e (i32.add (local.get $e) (i32.const 4)))
        (local.set $k (i32.add (local.get $k) (i32.const 1)))
        (br $ends)))
    (if (i32.ge_s (local.get $skip) (i32.const 0))
      (then
        (i32.store (local.get $e) (i32.const 1))
        (i32.store (i32.add (local.get $e) (i32.const 4)) (local.get $skip))
        (i32.store (i32.add (local.get $e) (i32.const 8)) (i32.const 4))
        (i32.store (i32.add (local.get $e) (i32.const 12)) (i32.const 2))
        (i32.store16 (i32.add (local.get $e) (i32.const 16)) (i32.const 0x6f6e))
        (local.set $e (i32.add (local.get $e) (i32.const 18))))
      (else
        (i32.store (local.get $e) (i32.const 0))
        (local.set $e (i32.add (local.get $e) (i32.const 4)))))
    (call $ret (i32.const 0) (local.get $o) (i32.sub (local.get $e) (local.get $o))))

  ;; Explain: status 0, the frame echoed, then a fixed trace.
  (func (export "omlet_explain") (param $gen i64) (param $route i32) (param $rlen i32) (param $flen i32)
    (local $m i32) (local $o i32)
    (local.set $m (call $mode (local.get $route) (local.get $rlen)))
    (local.set $o (call $out))
    (if (i32.eq (local.get $m) (i32.const 114))
      (then
        (i32.store (local.get $o) (i32.const 4))
        (i32.store (i32.add (local.get $o) (i32.const 4)) (i32.const 3))
        (i32.store (i32.add (local.get $o) (i32.const 8)) (i32.const 0x6f6f62))
        (memory.copy (i32.add (local.get $o) (i32.const 11)) (i32.const 8000) (i32.const 12))
        (call $ret (i32.const 0) (local.get $o) (i32.const 23))
        (return)))
    (if (call $common (local.get $m) (local.get $rlen)) (then (return)))
    (i32.store (local.get $o) (i32.const 0))
    (i32.store (i32.add (local.get $o) (i32.const 4)) (local.get $flen))
    (memory.copy (i32.add (local.get $o) (i32.const 8)) (i32.add (i32.const 65536) (local.get $rlen)) (local.get $flen))
    (memory.copy (i32.add (i32.add (local.get $o) (i32.const 8)) (local.get $flen)) (i32.const 8000) (i32.const 12))
    (call $ret (i32.const 0) (local.get $o) (i32.add (local.get $flen) (i32.const 20))))
)
