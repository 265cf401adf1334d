/* thread_switch.S: the user-level threads' context switch and first entry (x86-64 System V). */

/*
 * void fp_uctx_switch(void **save_sp, void *load_sp)
 *
 * Pushes the callee-saved registers on the current stack (the return address the call
 * pushed stays under them), stores the stack pointer in *save_sp, loads load_sp, pops the
 * registers saved there and returns to the address under them: the other context's own
 * call of this function.
 *
 * A ret, not an indirect jmp (issue 19 measured the jmp faster, with Caladan's). Every
 * switch here is made from one call site (thread.c's switch_away, or fp_sched_run), so
 * the return address the ret predicts, the one this call pushed, is the address it goes
 * to, and the return-stack predictor stays in step for the returns after it. A jmp
 * leaves this call's entry on that stack, so the next returns of the thread switched to
 * (switch_away's, fp_thread_yield's) are all predicted one entry off. Measured (fp-micro
 * --only thread:, this ending against "popq %rcx; jmpq *%rcx"): a yield between two
 * threads 3.2 ns with the ret, 13.6 ns with the jmp; spawn, run and join 37.6 ns against
 * 24.3 ns (a new thread's first entry, and the switch back from a thread that returned,
 * come from other call sites: there the jmp's extra entry happens to line up). Switches
 * between running threads are the common case, so the ret.
 */
	.text
	.globl fp_uctx_switch
	.type fp_uctx_switch, @function
	.p2align 4
fp_uctx_switch:
	.cfi_startproc
	pushq %rbp
	pushq %rbx
	pushq %r12
	pushq %r13
	pushq %r14
	pushq %r15
	movq %rsp, (%rdi)
	movq %rsi, %rsp
	popq %r15
	popq %r14
	popq %r13
	popq %r12
	popq %rbx
	popq %rbp
	ret
	.cfi_endproc
	.size fp_uctx_switch, .-fp_uctx_switch

/*
 * A new thread's first switch lands here (thread.c builds its stack so): %r12 holds the
 * thread, the stack is 16-byte aligned; fp__thread_main never returns.
 */
	.globl fp__uctx_entry
	.type fp__uctx_entry, @function
	.p2align 4
fp__uctx_entry:
	.cfi_startproc
	.cfi_undefined rip
	movq %r12, %rdi
	callq fp__thread_main
	ud2
	.cfi_endproc
	.size fp__uctx_entry, .-fp__uctx_entry

	.section .note.GNU-stack,"",@progbits
