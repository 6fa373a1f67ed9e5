// Runtime value -> template instance: dispatch_on<1, 2, 4, 8>(v, f) calls
// f(std::integral_constant<int, v>{}) for the one listed value equal to v, and returns false
// when v is none of them (a helper built for other values than this program was compiled for).
#pragma once
#include <type_traits>

template <int... Values, typename F>
bool dispatch_on(int value, F&& f) {
    return ((value == Values ? (f(std::integral_constant<int, Values>{}), true) : false) || ...);
}
