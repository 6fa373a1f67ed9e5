/* klaraptor instrument: the compiler's <stddef.h>, for parsing with libclang (whose wheel ships
 * no builtin headers). Built from clang's predefined macros. */
#ifndef KLARAPTOR_STDDEF_H
#define KLARAPTOR_STDDEF_H
typedef __SIZE_TYPE__ size_t;
typedef __PTRDIFF_TYPE__ ptrdiff_t;
typedef __WINT_TYPE__ wint_t;
#ifndef __cplusplus
typedef __WCHAR_TYPE__ wchar_t;
#endif
typedef struct { long long __klaraptor_ll; long double __klaraptor_ld; } max_align_t;
#undef NULL
#ifdef __cplusplus
#define NULL __null
#else
#define NULL ((void *)0)
#endif
#define offsetof(type, member) __builtin_offsetof(type, member)
#endif
