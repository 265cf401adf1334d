/* test_kv_store.c: (being written) */
int main(void) { return 77; }
